"""`icrl-jax pretrain-lm`: next-token pretraining of a small GPT-2 on natural-language text, so
that GPT-DTMA's language-initialised Decision Transformers can be studied where GPT-2 small's
weights cannot be downloaded.

Corpus (`lm.corpus`): "pydoc_topics", the text of CPython's `pydoc_data.topics` (the language
reference and library topics that `help()` shows: English documentation prose with grammar and
example lines, about 465k characters, installed with every Python), or a path to a UTF-8 text
file. Tokens are bytes (vocabulary 256, no tokenizer to ship). The last `lm.validation_fraction`
of the corpus is held out.

Training is the one trainer (`train.train`: resumable checkpoints, progress, NaN stop) on random
windows of `train.seq_len + 1` bytes. The work directory gets `hf/` (config.json +
model.safetensors that transformers' `GPT2LMHeadModel.from_pretrained` loads, `models/gpt2.py`)
and `lm.json`: validation bits per byte, and the Markov heads (GPT-DTMA Definition 1) of the
trained model next to those of its random initialisation.
"""

from __future__ import annotations

import os
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from icrl_jax.core.files import write_json
from icrl_jax.pipeline import train as trainer
from icrl_jax.papers.gpt_dtma.markov_heads import markov_heads, random_basis_ratio
from icrl_jax.data.train_data import on_device
from icrl_jax.core.errors import UserError
from icrl_jax.models.gpt2 import GPT2Config, GPT2LM, save_hf_gpt2

CORPORA = ("pydoc_topics",)


def corpus_bytes(name: str) -> bytes:
    """The named corpus, or the UTF-8 file at path `name`."""
    if name == "pydoc_topics":
        import pydoc_data.topics
        return "\n\n".join(pydoc_data.topics.topics[k]
                           for k in sorted(pydoc_data.topics.topics)).encode("utf-8")
    if not os.path.isfile(name):
        raise UserError(f"lm.corpus {name!r} is neither a known corpus ({', '.join(CORPORA)}) "
                        "nor a text file")
    with open(name, "rb") as f:
        return f.read()


def sample_byte_windows(tokens: jax.Array, key: jax.Array, batch_size: int, window: int):
    """`(B, window + 1)` int32 windows of the token stream, uniform starts, on device."""
    starts = jax.random.randint(key, (batch_size,), 0, tokens.shape[0] - window)
    return jax.vmap(lambda s: jax.lax.dynamic_slice_in_dim(tokens, s, window + 1))(starts)


class CausalLM:
    """What the trainer needs of a model: `init` and the next-token `loss`."""

    trainable = None  # every parameter trains

    def __init__(self, config: GPT2Config):
        self.config = config
        self.model = GPT2LM(config)

    def init(self, key, example):
        return self.model.init({"params": key}, example[:, :-1])["params"]

    def logits(self, params, ids):
        return self.model.apply({"params": params}, ids).astype(jnp.float32)

    def loss(self, params, batch, key=None):
        logits = self.logits(params, batch[:, :-1])
        targets = batch[:, 1:]
        log_probs = jax.nn.log_softmax(logits, -1)
        nll = -jnp.take_along_axis(log_probs, targets[..., None], -1)[..., 0].mean()
        accuracy = (jnp.argmax(logits, -1) == targets).mean()
        return nll, {"loss": nll, "accuracy": accuracy}


def model_config(config) -> GPT2Config:
    return GPT2Config(vocab_size=256, n_positions=int(config.train.seq_len),
                      n_embd=int(config.model.d_model), n_layer=int(config.model.num_layers),
                      n_head=int(config.model.num_heads))


def pretrain(config) -> dict[str, Any]:
    """Pretrain (resuming), write `hf/` and `lm.json`; returns lm.json's content."""
    text = np.frombuffer(corpus_bytes(config.lm.corpus), np.uint8).astype(np.int32)
    held = int(len(text) * float(config.lm.validation_fraction))
    window = int(config.train.seq_len)
    if len(text) - held <= window + 1 or held <= window + 1:
        raise UserError(f"a corpus of {len(text)} bytes is too short for windows of {window} "
                        f"with {config.lm.validation_fraction} held out")
    train_tokens, valid_tokens = text[:-held], text[-held:]
    cfg = model_config(config)
    lm = CausalLM(cfg)
    data = on_device(jnp.asarray(train_tokens), sample_byte_windows, window)
    signature = dict(method="gpt2_lm", gpt2=cfg.__dict__, corpus=config.lm.corpus)
    state = trainer.train(lm, data, config.train, config.workdir, signature, seed=int(config.seed),
                    show_progress=bool(config.run.progress), log=config.log)
    params = jax.tree.map(jnp.asarray, state.params)
    save_hf_gpt2(os.path.join(config.workdir, "hf"), cfg, params)
    # Validation: consecutive non-overlapping windows of the held-out text.
    count = (len(valid_tokens) - 1) // window
    ids = valid_tokens[: count * window + 1]
    windows = np.stack([ids[i * window:(i + 1) * window + 1] for i in range(count)])
    nll = float(jax.jit(lambda p, b: lm.loss(p, b)[0])(params, jnp.asarray(windows)))
    initial = lm.init(jax.random.PRNGKey(int(config.seed)), jnp.asarray(windows[:1]))
    result = dict(
        corpus=config.lm.corpus, corpus_bytes=int(len(text)), validation_bytes=int(held),
        tokenizer="bytes (vocabulary 256)", model=cfg.__dict__, steps=int(state.step),
        validation_bits_per_byte=round(nll / np.log(2), 4),
        uniform_bits_per_byte=8.0,
        markov_heads_trained=markov_heads(params["transformer"]),
        # What R.2 an exactly self-attending head reaches in a random basis (markov_heads.py).
        r2_of_an_aligned_head_in_a_random_basis=round(
            random_basis_ratio(cfg.n_embd // cfg.n_head), 3),
        markov_heads_random_init=markov_heads(initial["transformer"]))
    write_json(os.path.join(config.workdir, "lm.json"), result, indent=1)
    found = [(h["layer"], h["head"], h["r2"]) for h in result["markov_heads_trained"]
             if h["markov"]]
    print(f"validation {result['validation_bits_per_byte']} bits/byte; Markov heads "
          f"(layer, head, R.2): {found or 'none'}; HF checkpoint in {config.workdir}/hf")
    return result
