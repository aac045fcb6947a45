"""The core: run, train, config, checkpoints, metrics, CLI, logging and the registry. It names no paper."""
