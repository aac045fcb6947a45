"""One package per paper; each registers its parts from its `plugin` module (core.registry)."""
