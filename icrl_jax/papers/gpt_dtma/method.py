"""GPT-DT and its Mixture-of-Attention variants (GPT-DTMA paper, Table 3's columns): the Decision
Transformer (`methods/dt.py`) with a language model's blocks, MoA gates and the Markov-head
penalty. Method `gpt_dt`; with every switch off it is the DT from scratch.

* `model.pretrained=DIR` (GPT-DT): the transformer blocks and final norm come from a Hugging Face
  GPT-2 directory (`models/gpt2.py`; GPT-2 small, or `icrl-jax pretrain-lm`'s checkpoint); the
  embeddings and the action head are new, as Reid et al. do. The model fields must match the LM's
  architecture (a clear error names each field that does not), or `model.pretrained_architecture`
  takes them from the LM. A CLIP text-encoder directory works the same (CLIP-DT, labelled
  `clip_dt`; `models/pretrained.py`; it needs `model.activation=quick_gelu`).
* `model.mixture_of_attention` (DTMA, and GPT-DTMA with `pretrained`): MoA gates per layer
  (`models/attention.py`); the loss logs `g_markov`, the gates' mean weight on the LM's Markov
  heads (GPT-DTMA Definition 1, r = 20).
* `model.markov_penalty=alpha` (GPT-DTMA-R): adds alpha * g_markov to the loss (paper Eq. 8).
* `model.freeze_attention` (GPT-DT(part), Table 7): the LM's attention is not fine-tuned.

Evaluation then also writes `heads.json` / `head_importance.png` (`write_head_analysis`) and,
for a language-initialised model, the attention before and after fine-tuning (Fig. 4).
"""

from __future__ import annotations

import os

import jax
import jax.numpy as jnp
import numpy as np

from icrl_jax.core.files import write_json
from icrl_jax.core.errors import UserError
from icrl_jax.data.trajectories import Trajectories
from icrl_jax.methods import register
from icrl_jax.methods.dt import DecisionTransformer
from icrl_jax.methods.dt_attention import context_attention
from icrl_jax.models.pretrained import (adopt_pretrained_architecture, backbone_from_lm,
                                        cached_pretrained, check_backbone_fits,
                                        pretrained_family)
from icrl_jax.papers.gpt_dtma.analysis import (ablation_importance, gate_importance,
                                               plot_attention_before_after, plot_head_importance,
                                               self_attention)
from icrl_jax.papers.gpt_dtma.markov_heads import markov_heads, markov_mask


def frozen_attention_labels(params) -> dict:
    """GPT-DT(part)'s trainable mask: False for the backbone's attention sublayers (the
    language model's qkv and output projections), True for everything else."""
    def trainable(path, _):
        keys = [getattr(p, "key", None) for p in path]
        return not (keys[:1] == ["backbone"] and "attention" in keys)
    return jax.tree_util.tree_map_with_path(trainable, params)


@register
class GPTDecisionTransformer(DecisionTransformer):
    """A DT whose backbone may start from a language model, with MoA gates and the Markov-head
    penalty (see the module docstring). Model fields: `papers.gpt_dtma.fields`."""

    name = "gpt_dt"
    display_name = "GPT-DT"
    label_name = "dt"

    def __init__(self, model_config, action_dims, context_len, num_observations=None,
                 continuous_dim: int = 0):
        super().__init__(model_config, action_dims, context_len, num_observations,
                         continuous_dim)
        self.pretrained = str(model_config.pretrained)
        self.mixture = bool(model_config.mixture_of_attention)
        self.markov_penalty = model_config.markov_penalty
        if isinstance(self.markov_penalty, (int, float)) and self.markov_penalty and not (
                self.mixture and self.pretrained):
            raise UserError("model.markov_penalty penalises the MoA gates of the language "
                            "model's Markov heads: it needs model.mixture_of_attention=True and "
                            "model.pretrained=<a GPT-2 or CLIP directory>")
        if model_config.freeze_attention:
            if not self.pretrained:
                raise UserError("model.freeze_attention keeps the language model's attention "
                                "(GPT-DT(part)): it needs model.pretrained=<a GPT-2 or CLIP "
                                "directory>")
            self.trainable = frozen_attention_labels
        if self.pretrained:
            # GPT-2, CLIP text or Llama; only the first k blocks with model.pretrained_layers=k
            stack, stack_params = cached_pretrained(self.pretrained,
                                                    int(model_config.pretrained_layers))
            check_backbone_fits(stack, int(model_config.d_model), self.backbone, self.pretrained)
            self.lm_params = stack_params  # the LM's block stack, in our Transformer layout
            self.markov = markov_mask(stack_params)

    @classmethod
    def prepare_config(cls, config) -> None:
        adopt_pretrained_architecture(config.model)

    @classmethod
    def signature(cls, config, env) -> dict:
        signature = super().signature(config, env)
        if config.model.pretrained:  # same shapes as a DT from scratch: say which init
            signature["pretrained"] = os.path.basename(os.path.normpath(config.model.pretrained))
            if config.model.pretrained_layers:
                signature["pretrained_layers"] = int(config.model.pretrained_layers)
        return signature

    @classmethod
    def variant_prefix(cls, config) -> str:
        pretrained = config.model.pretrained
        return pretrained_family(pretrained) + "_" if pretrained else ""

    @classmethod
    def variant_suffix(cls, config) -> str:
        """With `variant_prefix`, GPT-DTMA's columns: `dt`, `dtma`, `gpt_dt`, `gpt_dtma`,
        `gpt_dtma_r`, `gpt_dt_part` (`clip_dt`, `clip_dtma` for a CLIP text encoder)."""
        model = config.model
        return ("ma" * bool(model.mixture_of_attention) + "_r" * bool(model.markov_penalty)
                + "_part" * bool(model.freeze_attention))

    def init(self, key: jax.Array, example: Trajectories):
        params = super().init(key, example)
        if self.pretrained:  # GPT-/CLIP-DT: the LM's blocks, this model's embeddings and heads
            params = dict(params, backbone=backbone_from_lm(params["backbone"], self.lm_params,
                                                            self.pretrained))
        return params

    def forward_for_loss(self, params, batch: Trajectories, deterministic: bool, key):
        if not self.mixture:
            return super().forward_for_loss(params, batch, deterministic, key)
        out, gates = self.apply(params, batch, deterministic, key, return_gates=True)
        metrics = self.gate_metrics(gates, batch.mask)
        return out, metrics, metrics.get("markov_penalty", 0.0)

    def gate_metrics(self, gates: jax.Array, step_mask: jax.Array) -> dict[str, jax.Array]:
        """MoA readouts of a batch: G_Markov (the summed mean gates of the language model's
        Markov heads) and GPT-DTMA-R's penalty, alpha * G_Markov (paper Eq. 8)."""
        if not self.pretrained:
            return {}
        importance = gate_importance(gates, self.token_weight(step_mask))
        g_markov = (importance * jnp.asarray(self.markov, jnp.float32)).sum()
        return {"g_markov": g_markov, "markov_penalty": self.markov_penalty * g_markov}

    def write_analysis(self, params, final_states, config, env) -> dict:
        """The DT's attention maps; for a language-initialised or MoA model also the head
        analysis (`write_head_analysis`)."""
        results = super().write_analysis(params, final_states, config, env)
        if results and (self.pretrained or self.mixture):
            results.update(self.write_head_analysis(
                params, self.last_contexts(final_states, config), config))
        return results

    def write_head_analysis(self, params, contexts: Trajectories, config) -> dict:
        """The head analysis on the evaluation rollouts' last contexts (`(N, K, ...)`, the envs
        whose last step is valid): the ablation importance ||o - o_{-i}|| of every head, the MoA
        gate importance and G_Markov, and the Markov heads of the fine-tuned model next to the
        language model's. Writes `heads.json` and `head_importance.png`."""
        contexts = jax.tree.map(lambda x: jnp.asarray(x[contexts.mask[:, -1]]), contexts)
        if contexts.mask.shape[0] == 0:  # no env ended on a valid step: nothing to ablate
            return {}
        layers, heads = int(self.config.num_layers), int(self.config.num_heads)
        importance = ablation_importance(
            lambda scale: self.apply(params, contexts, head_scale=scale)[:, -1].astype(
                jnp.float32), layers, heads)
        stats = markov_heads(params["backbone"])
        finetuned = np.array([h["markov"] for h in stats], bool).reshape(layers, heads)
        result = dict(label=self.label(config), envs=int(contexts.mask.shape[0]),
                      ablation_importance=importance.round(5).tolist(),
                      markov_heads_finetuned=finetuned.tolist(),
                      # the fine-tuned heads' R.1 fraction and R.2 (`(L, H)`), the Markov table's
                      finetuned_r1_fraction=[[h["r1_fraction"] for h in stats[i:i + heads]]
                                             for i in range(0, len(stats), heads)],
                      finetuned_r2=[[h["r2"] for h in stats[i:i + heads]]
                                    for i in range(0, len(stats), heads)])
        if self.pretrained:
            result["markov_heads_pretrained"] = self.markov.tolist()
            result.update(self.write_attention_before_after(params, contexts, config))
        if self.mixture:
            _, gates = self.apply(params, contexts, return_gates=True)
            gate = np.asarray(gate_importance(gates, self.token_weight(contexts.mask)))
            result["gate_importance"] = gate.round(5).tolist()
            if self.pretrained:
                result["g_markov"] = round(float((gate * self.markov).sum()), 5)
        write_json(os.path.join(config.workdir, "heads.json"), result, indent=1)
        plot_head_importance(importance, self.markov if self.pretrained else finetuned,
                             os.path.join(config.workdir, "head_importance.png"),
                             f"{config.experiment} ({self.label(config)}): ||o - o_-i||")
        return {k: result[k] for k in ("g_markov",) if k in result} | {
            "heads_file": "heads.json"}

    def write_attention_before_after(self, params, contexts: Trajectories, config) -> dict:
        """Fig. 4 on evaluation contexts `(N, K, ...)`: attention of the language model's most
        and least Markov-like heads (largest and smallest R.2) before fine-tuning (the LM's
        blocks with this model's freshly initialised embeddings, `config.seed`) and after, on
        env 0's context (`attention/before_after.png`), and every head's mean self-attention,
        the weight a token puts on itself, over all N (`(L, H)` lists)."""
        initial = self.init(jax.random.key(int(config.seed)), jax.tree.map(lambda x: x[:1],
                                                                          contexts))
        heads = int(self.config.num_heads)
        stats = markov_heads(initial["backbone"])
        r2 = np.array([h["r2"] for h in stats])
        chosen = [(int(i) // heads, int(i) % heads, caption) for i, caption in (
            (np.argmax(r2), f"largest R.2 {r2.max():.2f}"),
            (np.argmin(r2), f"smallest R.2 {r2.min():.2f}"))]
        weight = self.token_weight(contexts.mask)
        before = self_attention(self.apply(initial, contexts, return_attention=True)[1], weight)
        after = self_attention(self.apply(params, contexts, return_attention=True)[1], weight)
        context = jax.tree.map(lambda x: x[0], contexts)
        maps_before, labels = context_attention(self, initial, context)
        maps_after, _ = context_attention(self, params, context)
        path = plot_attention_before_after(
            maps_before, maps_after, chosen, labels,
            os.path.join(config.workdir, "attention", "before_after.png"),
            f"{config.experiment} ({self.label(config)}) env 0")
        return dict(lm_r2=r2.reshape(-1, heads).tolist(),
                    lm_r1_fraction=np.array([h["r1_fraction"] for h in stats]).reshape(
                        -1, heads).tolist(),
                    self_attention_before=before.round(4).tolist(),
                    self_attention_after=after.round(4).tolist(),
                    attention_before_after=os.path.relpath(path, config.workdir))
