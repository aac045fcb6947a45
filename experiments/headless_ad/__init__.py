"""Headless-AD paper experiments (Sinii et al., 2024): bandits and composite-action darkroom."""
