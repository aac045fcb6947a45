"""Registers GPT-DTMA's parts: the `gpt_dt` method and the `pretrain-lm` command."""

from icrl_jax.core.registry import COMMANDS, Command
from icrl_jax.papers.gpt_dtma import fields, lm_pretrain, method  # noqa: F401

COMMANDS.register("pretrain-lm", Command(
    "pretrain-lm", lm_pretrain.pretrain, "with a language-model config (an `lm` section, "
    "experiments/gpt_dtma/lm.py): next-byte pretraining of a small GPT-2 on text, written in "
    "Hugging Face format to <workdir>/hf/", config_section="lm"))
