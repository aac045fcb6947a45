"""Registers the n-gram paper's parts: `pretrain-vq`, and the run hook that resolves and
pretrains the VQ-VAE of a config whose n-gram layers match VQ codes."""

from icrl_jax.pipeline import run as run_pipeline
from icrl_jax.core.registry import COMMANDS, HOOKS, Command
from icrl_jax.papers.ngram import fields  # noqa: F401  (declares the `vq` section's constraints)
from icrl_jax.papers.ngram.vq_pretrain import needs_vq, pretrain_vq, resolve_vq_checkpoint


class VQStage:
    """`model.ngram_match="vq"`: find (or place) the VQ-VAE once the config is final, and
    pretrain it before `train` when the config has a `vq` section."""

    applies = staticmethod(needs_vq)

    @staticmethod
    def resolve(config, env) -> None:
        resolve_vq_checkpoint(config, env)

    @staticmethod
    def before_train(config, env, dataset_fn) -> None:
        if "vq" in config:
            pretrain_vq(config, env, dataset_fn())


def _pretrain_vq(config):
    env = run_pipeline.build_env(config)
    return pretrain_vq(config, env, run_pipeline.dataset_of(config, env))


HOOKS.register("vq_pretraining", VQStage())
COMMANDS.register("pretrain-vq", Command(
    "pretrain-vq", _pretrain_vq, "with a config that has a `vq` section "
    "(experiments/miniworld/): the VQ-VAE whose codes the n-gram layers match, pretrained on the "
    "frames of the pixel store"))
