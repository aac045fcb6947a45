"""Host-simulator experiments (Miniworld, ViZDoom) driven through envs.host.bridge."""
