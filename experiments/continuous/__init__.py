"""Continuous-control experiments: point maze (DT on Minari maze data) and brax locomotion."""
