"""GPT-DTMA (`../shared/papers/gpt_dtma.txt`): language-initialised Decision Transformers with a
Mixture of Attention heads, as `icrl-jax report` tables of DT variants x 3 seeds.

* `hopper.py`: Table 3's analogue (short-term planning; D4RL-normalised score, higher is better);
* `point_maze.py`: Table 4's analogue (long-term planning; episode length to the goal, lower is
  better), and Table 5's context-length study with `:context`.
* `lm.py`: the small language model the `:quick` presets start from (`icrl-jax pretrain-lm`).

Every column shares the architecture of the language model (GPT-2 small at paper scale: 12
layers, 12 heads, width 768; `lm.py:quick`'s 4 x 128 with 4 heads at `:quick`), so DT and DTMA are
the same network trained from scratch.
"""

import ml_collections

from icrl_jax.papers.gpt_dtma.fields import gpt_dt_fields

#: Table 3 / 4's columns: (dotted override, value) pairs; "{pretrained}" is the language model.
COLUMNS = {
    "DT": (),
    "DTMA": (("model.mixture_of_attention", True),),
    "GPT-DT": (("model.pretrained", "{pretrained}"),),
    "GPT-DTMA": (("model.pretrained", "{pretrained}"), ("model.mixture_of_attention", True)),
    "GPT-DTMA-R": (("model.pretrained", "{pretrained}"), ("model.mixture_of_attention", True),
                   ("model.markov_penalty", 0.1)),  # the paper's alpha
    # Table 3's CLIP-DT: CLIP's text encoder (`--config.report.clip=DIR`, a Hugging Face
    # CLIPTextModel or CLIPModel directory) in its own shape; skipped when no directory is given.
    "CLIP-DT": (("model.pretrained", "{clip}"), ("model.pretrained_architecture", True)),
    # Table 7: only the embeddings and feed-forward layers fine-tune.
    "GPT-DT(part)": (("model.pretrained", "{pretrained}"), ("model.freeze_attention", True)),
}

QUICK_COLUMNS = ("DT", "GPT-DT", "GPT-DTMA", "CLIP-DT")  # CLIP-DT only with report.clip

#: Where `icrl-jax pretrain-lm --config experiments/gpt_dtma/lm.py:quick
#: --config.workdir=runs/gpt2_lm_quick` writes its Hugging Face checkpoint.
QUICK_LM = "runs/gpt2_lm_quick/hf"

#: The quick LM's architecture (lm.py:quick) and a short fine-tuning run.
QUICK_MODEL = {"model.d_model": 128, "model.num_layers": 4, "model.num_heads": 4,
               "train.num_steps": 1000, "train.batch_size": 32, "train.learning_rate": 1e-3,
               "report.pretrained": QUICK_LM}


def apply_quick(config) -> None:
    """The `:quick` model and run of every GPT-DTMA table (QUICK_MODEL)."""
    for dotted, value in QUICK_MODEL.items():
        section, key = dotted.split(".")
        config[section][key] = value


def quick_columns(config) -> None:
    """`:quick` trains the three columns the paper's claims need (DT, GPT-DT, GPT-DTMA), 9 runs
    per table on the 2-core CPU; the paper-scale default has them all."""
    config.columns = type(config.columns)({k: config.columns[k] for k in QUICK_COLUMNS
                                           if k in config.columns})


def add_columns(config, columns: tuple[str, ...], metrics: tuple[str, ...]) -> None:
    """Make `config` (a DT experiment) a GPT-DTMA table: `columns` of COLUMNS, 3 seeds,
    `metrics` read from each seed's eval.json. GPT-2's LayerNorm epsilon for every column;
    the language model comes from `--config.report.pretrained=DIR` (GPT-2 small at paper
    scale, which cannot be downloaded here)."""
    config.method = "gpt_dt"  # the DT with GPT-DTMA's switches (all off: the DT column)
    config.model.update(gpt_dt_fields())
    config.columns = ml_collections.ConfigDict({name: COLUMNS[name] for name in columns})
    config.report.update(dict(kind="columns", num_seeds=3, metrics=metrics, run_metrics=("g_markov",),
                              pretrained="",
                              clip="", optional_columns=("CLIP-DT",)))
    config.model.norm_epsilon = 1e-5
