"""`icrl-jax generate|train|evaluate --config experiments/<paper>/<exp>.py[:preset] [--config.x.y=v]`

* generate: learning histories of the configured source algorithm on the training tasks.
* train: generate (if the dataset is missing), train, then evaluate (unless `--config.run.evaluate=False`).
  A run whose work directory already holds checkpoints resumes from the latest one.
* evaluate: in-context evaluation of the latest checkpoint on held-out tasks.
"""

from __future__ import annotations

import sys

from absl import app, flags
from ml_collections import config_flags

COMMANDS = ("generate", "train", "evaluate")

_CONFIG = config_flags.DEFINE_config_file(
    "config", None, "Experiment config file, optionally with ':preset' (e.g. "
    "experiments/ad/darkroom.py:quick).", lock_config=True)


def _run(argv: list[str]) -> None:
    from icrl_jax import pipeline

    commands = [a for a in argv[1:]]
    if len(commands) != 1 or commands[0] not in COMMANDS:
        raise app.UsageError(f"usage: icrl-jax {{{'|'.join(COMMANDS)}}} --config FILE[:preset] "
                             f"[--config.key=value ...]; got {commands or 'no command'}")
    if _CONFIG.value is None:
        raise app.UsageError("--config is required, e.g. --config experiments/ad/darkroom.py:quick")
    config = pipeline.resolve_config(_CONFIG.value)
    command = commands[0]
    if command == "generate":
        pipeline.generate(config, force=True)
    elif command == "train":
        pipeline.train(config)
    else:
        pipeline.evaluate(config)


def main() -> None:
    try:
        app.run(_run)
    except KeyError as e:  # unknown --config.* key: ml_collections raises KeyError
        print(f"icrl-jax: configuration error: {e}", file=sys.stderr)
        sys.exit(2)


if __name__ == "__main__":
    main()
