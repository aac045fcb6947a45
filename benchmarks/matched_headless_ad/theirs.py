"""The authors' Headless-AD, trained and evaluated on the exported data (a python with torch).

    /work/venv-ref/bin/python benchmarks/matched_headless_ad/theirs.py /work/ref/headless-ad \\
        --data runs/matched_headless_ad --seeds 0 1 2

`--data` is what export_histories.py wrote. Each seed follows the steps of their `train()`
(`src/bandit/algorithms/headless_ad.py`) with their own objects, imported from the checkout
(reference_port.py: CPU stand-ins for the CUDA kernels): their `SequenceDataset` over the
exported histories in a shuffling `DataLoader` (batch `batch_size`, drop_last), their `Model`
with `_init_weights`, AdamW(lr, weight decay, betas (beta1, 0.999)), their
`cosine_annealing_with_warmup`, an `ActionMapper` regenerated at every step, their `loss_fn` on
`pred[:, :-1]`, gradient clipping, then their `evaluate_in_context` on the exported held-out
bandits (their env and policy; `eval_seed` = 1000 + seed). Left out, as logging or launching
only: wandb, accelerate (float32 on the CPU instead of bf16 / fp16 autocast), the data
generation and baselines (the data is ours), the 14 loader workers (the data is in memory), and
the training metrics other than the loss. Seeds: torch, numpy and Python's `random` (their
`set_seed` leaves torch unseeded).

Writes `<data>/theirs/seed_<s>.json`: the final cumulative regret of each held-out bandit, its
mean, the loss every 100 updates, and the training and evaluation wall times; and the trained
weights, `<data>/theirs/seed_<s>.safetensors` (with safetensors installed).
"""

from __future__ import annotations

import argparse
import json
import os
import random
import sys
import time
from functools import partial

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import reference_port  # noqa: E402


def train_one(ref, settings: dict, data: str, seed: int, log_every: int = 100) -> dict:
    import torch
    from torch.utils.data import DataLoader

    torch.manual_seed(seed)
    np.random.seed(seed)
    random.seed(seed)
    tm = ref.train_module
    config = tm.Config(**{k: v for k, v in settings.items() if k in tm.Config.__dataclass_fields__},
                       train_seed=seed, device="cpu",
                       learning_histories_path=os.path.join(data, "trajectories"))
    dataset = ref.SequenceDataset(runs_path=config.learning_histories_path, seq_len=config.seq_len)
    loader = DataLoader(dataset, batch_size=config.batch_size, shuffle=True, drop_last=True,
                        num_workers=0, generator=torch.Generator().manual_seed(seed))
    model_config = ref.Config(
        block_size=2 * config.seq_len + 100, n_layer=config.num_layers, n_head=config.num_heads,
        n_embd=config.d_model, bias=config.layer_norm_bias,
        rotary_percentage=config.rotary_percentage, parallel_residual=config.parallel_residual,
        shared_attention_norm=config.shared_attention_norm, _norm_class=config._norm_class,
        _mlp_class=config._mlp_class, dropout=config.dropout,
        attention_dropout=config.attention_dropout)
    model = ref.Model(config=model_config, n_token=config.token_embed_dim,
                      use_action_set_prompt=config.use_action_set_prompt)
    model.apply(partial(model._init_weights, n_layer=model_config.n_layer))
    optim = torch.optim.AdamW(model.parameters(), lr=config.learning_rate,
                              weight_decay=config.weight_decay, betas=(config.beta1, 0.999))
    scheduler = ref.cosine_annealing_with_warmup(
        optimizer=optim, warmup_steps=int(config.num_train_steps * config.warmup_ratio),
        total_steps=config.num_train_steps)
    stream = tm.next_dataloader(loader)
    mapper = ref.ActionMapper(action_embed_dim=config.token_embed_dim,
                              num_actions=config.train_max_arms, device="cpu",
                              sim_measure=config.sim_measure, rand_emb_type=config.rand_emb_type)
    losses = {}
    start = time.perf_counter()
    for step in range(1, config.num_train_steps + 1):
        _, actions, rewards, num_actions = next(stream)
        actions, rewards = actions.to(torch.long), rewards.to(torch.long)
        num_actions = num_actions.to(torch.long)
        mapper.regenerate()
        embeds = mapper(actions)
        prompt = mapper._get_action_map_as_context(num_actions_per_env=num_actions)
        pred = model(act_emb=embeds, rewards=rewards, action_set_prompt=prompt)[:, :-1]
        loss, _ = tm.loss_fn(pred_embs=pred, action_embs=mapper.action_map, actions=actions,
                             num_actions_per_env=num_actions, tau=config.tau,
                             sim_measure=config.sim_measure)
        optim.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), config.clip_grad_norm)
        optim.step()
        scheduler.step()
        if step % log_every == 0:
            losses[step] = float(loss.item())
    train_seconds = time.perf_counter() - start
    bandits = np.load(os.path.join(data, "eval_bandits.npz"))
    start = time.perf_counter()
    regrets, _, _ = tm.evaluate_in_context(config, model=model, arms_means=bandits["means"],
                                           num_actions_per_env=bandits["num_arms"])
    eval_seconds = time.perf_counter() - start
    final = np.asarray(regrets)[:, -1]
    try:  # the trained weights, for evaluating them with our code (cross_eval.py)
        from safetensors.torch import save_file
        save_file({k: v.contiguous() for k, v in model.state_dict().items()},
                  os.path.join(data, "theirs", f"seed_{seed}.safetensors"))
    except ImportError:
        pass
    return dict(seed=seed, final_regret=float(final.mean()), final_regrets=final.tolist(),
                losses=losses, train_seconds=train_seconds, eval_seconds=eval_seconds,
                num_updates=config.num_train_steps, load_average=os.getloadavg(),
                torch=torch.__version__, threads=torch.get_num_threads())


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("checkout", help="a checkout of github.com/corl-team/headless-ad")
    parser.add_argument("--data", default="runs/matched_headless_ad")
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    parser.add_argument("--num-steps", type=int, default=0, help="override the updates")
    parser.add_argument("--threads", type=int, default=1,
                        help="torch's CPU threads (on 2 shared cores 1 was 9x faster than 2)")
    args = parser.parse_args(argv)
    try:
        import torch
    except ImportError:
        raise SystemExit("theirs.py needs torch (e.g. /work/venv-ref/bin/python)") from None
    torch.set_num_threads(args.threads)
    ref = reference_port.load(args.checkout)
    if not ref.has_gym:
        raise SystemExit("their evaluation steps their gymnasium env: pip install gymnasium")
    with open(os.path.join(args.data, "matched.json")) as f:
        settings = json.load(f)
    if args.num_steps:
        settings["num_train_steps"] = args.num_steps
    out = os.path.join(args.data, "theirs")
    os.makedirs(out, exist_ok=True)
    for seed in args.seeds:
        result = train_one(ref, settings, args.data, seed)
        with open(os.path.join(out, f"seed_{seed}.json"), "w") as f:
            json.dump(result, f, indent=1)
        print(json.dumps({k: v for k, v in result.items() if k != "final_regrets"}))


if __name__ == "__main__":
    main()
