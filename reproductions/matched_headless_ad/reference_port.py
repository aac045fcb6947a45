"""The Headless-AD authors' code on a CPU, for training: run with a python that has torch
(e.g. a virtualenv, see tests/fixtures/make_headless_ad_fixtures.py for how it was made; add
`pip install gymnasium` for their bandit env), never the project's.

`load(checkout)` imports their modules from a checkout of github.com/corl-team/headless-ad
(nothing of theirs is copied) after putting plain-PyTorch stand-ins under the names of the CUDA
kernels they import: the fixture script's (`install_kernel_stand_ins`: SDPA for flash-attn,
a plain SwiGLU for xformers', the rotary kernel in float32), with two changes training needs:

* `flash_attn_func` passes `dropout_p` to SDPA (the fixture's asserts it is 0). Like flash
  attention, it drops whenever `dropout_p > 0`, in training and evaluation alike.
* TinyLlama's `FusedRMSNorm` calls `rms_norm`, a fused kernel without a CPU backward; it is
  replaced by the same function in differentiable PyTorch: dropout of the input at the model's
  `dropout` (again whether training or not, as the kernel does), then
  x * rsqrt(mean(x^2) + eps) * weight in float32.

* Their attention applies the rotary kernel in place (`inplace=True`) on views of one split
  tensor, which autograd refuses on a CPU; the same kernel runs out of place (same values).

Everything runs in float32 (their script trains under bf16 / fp16 autocast on a GPU).
Packages their training script imports for logging and launching only (pyrallis, accelerate,
wandb, matplotlib; numba for their unused grid world) are stubbed as the fixture script does;
gymnasium and their `envs` package are real when gymnasium is installed (their evaluation
steps their env).
"""

from __future__ import annotations

import importlib.util
import os
import sys
import types

import torch
import torch.nn.functional as F

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
FIXTURE_SCRIPT = os.path.join(ROOT, "tests", "fixtures", "make_headless_ad_fixtures.py")


def _fixture_module():
    spec = importlib.util.spec_from_file_location("make_headless_ad_fixtures", FIXTURE_SCRIPT)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def flash_attn_func(q, k, v, dropout_p=0.0, softmax_scale=None, causal=False):
    """flash-attn's call on `(B, T, H, Dh)` tensors, by SDPA (dropout included)."""
    out = F.scaled_dot_product_attention(q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2),
                                         dropout_p=dropout_p, is_causal=causal,
                                         scale=softmax_scale)
    return out.transpose(1, 2)


def rms_norm(x, weight, epsilon, dropout):
    """Their fused `rms_norm(x, weight, eps, dropout)` in differentiable PyTorch."""
    if dropout > 0.0:
        x = F.dropout(x, dropout, training=True)
    x32 = x.float()
    return (x32 * torch.rsqrt(x32.pow(2).mean(-1, keepdim=True) + epsilon)
            * weight.float()).to(x.dtype)


def load(checkout: str) -> types.SimpleNamespace:
    """Their modules, importable on a CPU. Returns a namespace with `Model` (Headless-AD's bandit
    model), `Config` (TinyLlama's), `ActionMapper`, `train_module` (their
    `src/bandit/algorithms/headless_ad.py`: `Config`, `loss_fn`, `evaluate_in_context`, ...),
    `SequenceDataset`, `cosine_annealing_with_warmup` and `has_gym` (whether their env runs)."""
    checkout = os.path.abspath(checkout)
    if not os.path.isdir(os.path.join(checkout, "src", "bandit")):
        raise SystemExit(f"{checkout} is not a checkout of corl-team/headless-ad "
                         "(no src/bandit)")
    fixtures = _fixture_module()
    fixtures.install_kernel_stand_ins()
    sys.modules["flash_attn"].flash_attn_func = flash_attn_func
    has_gym = importlib.util.find_spec("gymnasium") is not None
    # numba: their grid world's (imported by their `envs` package, unused here)
    stubbed = ["pyrallis", "accelerate", "wandb", "matplotlib", "numba"]
    if not has_gym:
        stubbed += ["gymnasium", "envs"]
    if importlib.util.find_spec("tqdm") is None:
        stubbed.append("tqdm")
    fixtures.stub_packages(*stubbed)
    sys.path.insert(0, checkout)
    fixtures.use_flash_attention_everywhere()
    from src.tiny_llama import rmsnorm, transformer
    from src.tiny_llama.fused_rotary_embedding import ApplyRotaryEmb
    rmsnorm.rms_norm = rms_norm
    # their in-place rotary writes into views of one split, which autograd refuses on a CPU
    transformer.apply_rotary_emb_func = (
        lambda x, cos, sin, interleaved=False, inplace=False:
        ApplyRotaryEmb.apply(x, cos, sin, interleaved, False))
    from src.action_mapper import ActionMapper
    from src.bandit.algorithms import headless_ad as train_module
    from src.bandit.common.data import SequenceDataset
    from src.bandit.common.transformer import Model
    from src.tiny_llama.config import Config
    from src.utils.schedule import cosine_annealing_with_warmup
    return types.SimpleNamespace(Model=Model, Config=Config, ActionMapper=ActionMapper,
                                 train_module=train_module, SequenceDataset=SequenceDataset,
                                 cosine_annealing_with_warmup=cosine_annealing_with_warmup,
                                 has_gym=has_gym)
