"""DPT paper experiments (Lee et al., 2023): Gaussian bandits and Dark Room with held-out goals."""
