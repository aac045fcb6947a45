"""The authors' Headless-AD, trained and evaluated on the exported data (a python with torch).

    $REF_PYTHON reproductions/matched_headless_ad/theirs.py $HEADLESS_AD \\
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

`--eval-seeds E ...` only evaluates the saved weights of `--seeds`, once per evaluation seed
(their env resets, embedding map and, through torch's global generator, action sampling):
`<data>/theirs/seed_<s>_eval_<e>.json`. `--replacement` trains with batches drawn with
replacement, as our trainer draws them, instead of shuffled epochs (one deviation, measured on
their side) and writes to `<data>/theirs_replacement/`.
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


def build(ref, settings: dict, data: str, seed: int):
    """Their `Config` and their `Model` with `_init_weights`, as their `train()` makes them."""
    tm = ref.train_module
    config = tm.Config(**{k: v for k, v in settings.items() if k in tm.Config.__dataclass_fields__},
                       train_seed=seed, device="cpu",
                       learning_histories_path=os.path.join(data, "trajectories"))
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
    return config, model


def evaluate(ref, config, model, data: str) -> tuple[np.ndarray, float]:
    """Their `evaluate_in_context` on the exported held-out bandits: final regrets, seconds."""
    bandits = np.load(os.path.join(data, "eval_bandits.npz"))
    start = time.perf_counter()
    regrets, _, _ = ref.train_module.evaluate_in_context(
        config, model=model, arms_means=bandits["means"], num_actions_per_env=bandits["num_arms"])
    return np.asarray(regrets)[:, -1], time.perf_counter() - start


def evaluate_saved(ref, settings: dict, data: str, seed: int, eval_seed: int,
                   folder: str = "theirs") -> dict:
    """Seed `seed`'s saved weights under their evaluation with `eval_seed`: their env resets and
    embedding map take `config.eval_seed`; their action sampling draws from torch's global
    generator, seeded here with `eval_seed` too."""
    import torch
    from safetensors.torch import load_file

    config, model = build(ref, settings, data, seed)
    config.eval_seed = eval_seed  # after their __post_init__, which sets 1000 + train_seed
    model.load_state_dict(load_file(os.path.join(data, folder, f"seed_{seed}.safetensors")))
    torch.manual_seed(eval_seed)
    np.random.seed(eval_seed)
    random.seed(eval_seed)
    final, seconds = evaluate(ref, config, model, data)
    return dict(seed=seed, eval_seed=eval_seed, final_regret=float(final.mean()),
                final_regrets=final.tolist(), eval_seconds=seconds)


def train_one(ref, settings: dict, data: str, seed: int, log_every: int = 100,
              replacement: bool = False, folder: str = "theirs") -> dict:
    """`replacement`: batches drawn with replacement (our trainer's sampling) instead of their
    shuffled epochs, the one change, to measure that deviation."""
    import torch
    from torch.utils.data import DataLoader, RandomSampler

    torch.manual_seed(seed)
    np.random.seed(seed)
    random.seed(seed)
    tm = ref.train_module
    config, model = build(ref, settings, data, seed)
    dataset = ref.SequenceDataset(runs_path=config.learning_histories_path, seq_len=config.seq_len)
    generator = torch.Generator().manual_seed(seed)
    if replacement:
        sampler = RandomSampler(dataset, replacement=True, generator=generator,
                                num_samples=config.num_train_steps * config.batch_size)
        loader = DataLoader(dataset, batch_size=config.batch_size, sampler=sampler, drop_last=True,
                            num_workers=0)
    else:
        loader = DataLoader(dataset, batch_size=config.batch_size, shuffle=True, drop_last=True,
                            num_workers=0, generator=generator)
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
    final, eval_seconds = evaluate(ref, config, model, data)
    try:  # the trained weights, for evaluating them with our code (cross_eval.py)
        from safetensors.torch import save_file
        save_file({k: v.contiguous() for k, v in model.state_dict().items()},
                  os.path.join(data, folder, f"seed_{seed}.safetensors"))
    except ImportError:
        pass
    return dict(seed=seed, final_regret=float(final.mean()), final_regrets=final.tolist(),
                losses=losses, train_seconds=train_seconds, eval_seconds=eval_seconds,
                num_updates=config.num_train_steps, load_average=os.getloadavg(),
                torch=torch.__version__, threads=torch.get_num_threads(),
                sampling="with replacement" if replacement else "shuffled epochs")


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("checkout", help="a checkout of github.com/corl-team/headless-ad")
    parser.add_argument("--data", default="runs/matched_headless_ad")
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    parser.add_argument("--num-steps", type=int, default=0, help="override the updates")
    parser.add_argument("--eval-seeds", type=int, nargs="*", default=[],
                        help="only evaluate the saved weights of --seeds, once per seed given; "
                             "writes <data>/theirs/seed_<s>_eval_<e>.json")
    parser.add_argument("--replacement", action="store_true",
                        help="batches drawn with replacement (our trainer's sampling), not shuffled "
                             "epochs: <data>/theirs_replacement/ instead of <data>/theirs/")
    parser.add_argument("--threads", type=int, default=1,
                        help="torch's CPU threads (on 2 shared cores 1 was 9x faster than 2)")
    args = parser.parse_args(argv)
    try:
        import torch
    except ImportError:
        raise SystemExit("theirs.py needs torch (e.g. $REF_PYTHON)") from None
    torch.set_num_threads(args.threads)
    ref = reference_port.load(args.checkout)
    if not ref.has_gym:
        raise SystemExit("their evaluation steps their gymnasium env: pip install gymnasium")
    with open(os.path.join(args.data, "matched.json")) as f:
        settings = json.load(f)
    if args.num_steps:
        settings["num_train_steps"] = args.num_steps
    folder = "theirs_replacement" if args.replacement else "theirs"
    out = os.path.join(args.data, folder)
    os.makedirs(out, exist_ok=True)
    for seed in args.seeds:
        if args.eval_seeds:
            for eval_seed in args.eval_seeds:
                result = evaluate_saved(ref, settings, args.data, seed, eval_seed, folder)
                with open(os.path.join(out, f"seed_{seed}_eval_{eval_seed}.json"), "w") as f:
                    json.dump(result, f, indent=1)
                print(json.dumps({k: v for k, v in result.items() if k != "final_regrets"}))
            continue
        result = train_one(ref, settings, args.data, seed, replacement=args.replacement,
                           folder=folder)
        with open(os.path.join(out, f"seed_{seed}.json"), "w") as f:
            json.dump(result, f, indent=1)
        print(json.dumps({k: v for k, v in result.items() if k != "final_regrets"}))


if __name__ == "__main__":
    main()
