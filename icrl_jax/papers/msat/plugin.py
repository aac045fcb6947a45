"""Registers M-SAT's parts: the M-SAT and MAT methods and the ViZDoom expert data builder."""

from icrl_jax.papers.msat import method, recording  # noqa: F401
