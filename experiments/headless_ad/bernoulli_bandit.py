"""Headless-AD on Bernoulli bandits (Headless-AD 4.1, Table 1, Tables 3 and 5-7).

Thompson-sampling histories on 10,000 bandits x 300 steps with 4-20 arms ("train" reward
distribution). Evaluated on held-out bandits under the train, inverse and uniform distributions
and on 20, 25, 30, 40 and 50 arms (uniform), none of which it was trained on beyond 20 arms.

Ablations are presets (paper scale: the tuned values of Tables 5-7) or plain switches:
`--config.model.prompt=False`, `--config.model.loss=mse --config.eval.greedy=True`,
`--config.model.embeddings=normal`. Seeds: `--config.report.num_seeds=5` with `icrl-jax report`.
`:quick` fits a 2-core CPU in minutes; `:cpu` is the long CPU run.
"""

from icrl_jax.methods.fields import ad_config
from icrl_jax.experiments.headless_ad.common import ablation_presets, quick_preset
from icrl_jax.papers.headless_ad.fields import add_headless_fields
from icrl_jax.experiments.headless_ad.common import add_report_fields, bernoulli_variants
from icrl_jax.core.config import apply_preset

QUICK = quick_preset(120, **{
    "data.num_train_tasks": 2000,
    "data.num_test_tasks": 50,
    "model.action_embed_dim": 64,  # >= 50 arms for orthonormal embeddings
    "model.tau": 0.5,
})
# Tables 5-7: the ablations' tuned hyperparameters (paper scale).
NO_PROMPT = {"model.prompt": False, "model.tau": 0.92, "train.learning_rate": 5.0e-4,
             "train.weight_decay": 2.6e-5, "train.b1": 0.78, "model.attention_dropout": 0.28,
             "model.residual_dropout": 0.16}
MSE = {"model.loss": "mse", "eval.greedy": True, "train.learning_rate": 5.0e-5,
       "train.weight_decay": 0.17, "train.b1": 0.91, "model.attention_dropout": 1.0e-3,
       "model.residual_dropout": 0.14}
NORMAL = {"model.embeddings": "normal", "train.learning_rate": 1.1e-3,
          "train.weight_decay": 1.2e-3, "train.b1": 0.94, "model.attention_dropout": 0.62,
          "model.residual_dropout": 0.17}
PRESETS = ablation_presets(QUICK, {"no_prompt": NO_PROMPT, "mse": MSE, "normal": NORMAL})
# The longest CPU run: the quick 2x64 model on the paper's data (10,000 TS histories x 300 steps),
# 30,000 updates (`train.num_steps` higher resumes). Actions are sampled at temperature 0.5: of
# T = 1, 0.5, 0.33, 0.2 and the argmax, the one with the best score on held-out bandits of the
# *training* distribution (4-20 arms), not on the larger sets.
PRESETS["cpu"] = dict(QUICK, **{
    "data.num_steps": 300, "train.seq_len": 300, "eval.num_steps": 300,
    "data.num_train_tasks": 10_000, "data.num_test_tasks": 100, "train.num_steps": 30_000,
    "eval.temperature": 0.5})

# Side by side with the authors' code (benchmarks/matched_headless_ad/): one small configuration
# that both implementations train on 2 shared CPU cores in minutes (their PyTorch step is the
# slow one): the same 2,000 Thompson-sampling histories of 3-6 arms x 40 steps (a window is a
# whole history, as in their data when seq_len = num_env_steps), 800 updates of batch 16, their
# schedule (linear warmup over 10%, cosine to 0, clip 5, AdamW b2 0.999) and no dropout (their
# fused kernels also drop at evaluation). tau 1, so that their tau-free policy and our
# softmax(similarity / tau) are the same policy. `:matched_reference` is the authors' layout.
MATCHED = {
    "env.kwargs.arms": (3, 6), "data.num_train_tasks": 2000, "data.num_test_tasks": 100,
    "data.num_steps": 40, "train.seq_len": 40, "eval.num_steps": 40,
    "model.d_model": 64, "model.num_layers": 2, "model.num_heads": 4,
    "model.embedding_dropout": 0.0, "model.attention_dropout": 0.0,
    "model.residual_dropout": 0.0, "model.action_embed_dim": 16, "model.tau": 1.0,
    "train.num_steps": 800, "train.batch_size": 16, "train.learning_rate": 2e-3,
    "train.warmup_steps": 80, "train.min_lr_ratio": 0.0, "train.grad_clip": 5.0,
    "train.b1": 0.9, "train.b2": 0.999, "train.weight_decay": 1e-4,
    "train.steps_per_call": 100, "train.log_every": 100, "train.checkpoint_every": 800,
    "eval.baselines": ("source", "random"), "eval.greedy": False, "eval.temperature": 1.0,
}
PRESETS["matched"] = MATCHED
PRESETS["matched_reference"] = dict(MATCHED, **{"model.layout": "reference"})


def get_config(preset: str = ""):
    config = ad_config()
    config.experiment = "headless_ad_bernoulli"
    config.method = "headless_ad"
    config.env.name = "bernoulli_bandit"
    config.env.kwargs.arms = (4, 20)
    config.env.kwargs.distribution = "train"
    config.data.source = "thompson_sampling"
    config.data.num_train_tasks = 10_000
    config.data.num_test_tasks = 100
    config.data.num_steps = 300
    # Table 3, Bernoulli bandit column.
    config.model.d_model = 512
    config.model.num_layers = 4
    config.model.num_heads = 64
    config.model.position = "rotary"  # TinyLLaMa-style
    config.model.attention_dropout = 0.22
    config.model.residual_dropout = 0.12
    add_headless_fields(config, action_embed_dim=512, tau=1.34)
    config.train.num_steps = 20_000
    config.train.batch_size = 128
    config.train.seq_len = 300
    config.train.learning_rate = 3.1e-4
    config.train.weight_decay = 4.4e-3
    config.train.b1 = 0.68
    config.train.warmup_steps = 1000
    config.train.steps_per_call = 100
    config.train.log_every = 100
    config.train.checkpoint_every = 1000
    config.eval.num_steps = 300
    config.eval.greedy = False  # Table 3: sample
    config.variants = bernoulli_variants()
    add_report_fields(config, label="")
    return apply_preset(config, PRESETS, preset)
