"""CW-GRPO's policy loss next to verl's `vanilla` and `clip_cov`, on the same tensors, on the CPU.

    .venv/bin/python scripts/bench/cw_grpo_bench.py [--responses 64] [--tokens 4096] [--repeats 41]

Builds one batch (responses x tokens, random lengths from a quarter to all of the tokens, GRPO-style
advantages constant per response, float32), then for each loss times forward + backward through
the log-probs (the loss alone: no model), median of --repeats rounds (the losses take turns within
a round) after one warm-up, and prints a table with the ratio to `vanilla`. Single process, torch's default CPU threads. Writes nothing.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from verl.trainer.ppo.core_algos import get_policy_loss_fn  # noqa: E402

import recipes.methods.cw_grpo  # noqa: E402,F401  (registers the cw_grpo losses)


class PolicyLoss:
    clip_cov_ratio, clip_cov_lb, clip_cov_ub = 0.0002, 1.0, 5.0


class Cfg:
    """What verl's ActorConfig gives a policy loss."""

    clip_ratio = clip_ratio_low = 0.2
    clip_ratio_high = 0.28
    policy_loss = PolicyLoss()
    global_batch_info: dict = {}

    def get(self, key, default=None):
        return {"clip_ratio_c": 3.0}.get(key, default)


def batch(responses: int, tokens: int, seed: int = 0):
    g = torch.Generator().manual_seed(seed)
    lengths = torch.randint(tokens // 4, tokens + 1, (responses,), generator=g)
    mask = (torch.arange(tokens)[None, :] < lengths[:, None]).float()
    log_prob = -torch.rand(responses, tokens, generator=g) * 3
    old = log_prob + 0.05 * torch.randn(responses, tokens, generator=g)
    adv = torch.randn(responses, 1, generator=g).expand(responses, tokens).contiguous()
    return old, log_prob, adv, mask


def time_once(fn, tensors) -> float:
    old, log_prob, adv, mask = tensors
    lp = log_prob.clone().requires_grad_(True)
    t0 = time.perf_counter()
    loss, _ = fn(old, lp, adv, mask, loss_agg_mode="token-mean", config=Cfg())
    loss.backward()
    return time.perf_counter() - t0


def time_losses(names: list[str], tensors, repeats: int) -> dict[str, float]:
    """Median seconds per loss; the losses take turns, so drift in the machine's speed hits all."""
    fns = {n: get_policy_loss_fn(n) for n in names}
    for fn in fns.values():  # warm-up
        time_once(fn, tensors)
    times: dict[str, list[float]] = {n: [] for n in names}
    for _ in range(repeats):
        for n, fn in fns.items():
            times[n].append(time_once(fn, tensors))
    return {n: statistics.median(t) for n, t in times.items()}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--responses", type=int, default=64)
    parser.add_argument("--tokens", type=int, default=4096)
    parser.add_argument("--repeats", type=int, default=41)
    args = parser.parse_args()
    tensors = batch(args.responses, args.tokens)
    names = ["vanilla", "clip_cov", "cw_grpo", "cw_grpo-seqlogp-allpos-grad"]
    results = time_losses(names, tensors, args.repeats)
    valid = int(tensors[3].sum())
    print(
        f"{args.responses} responses x {args.tokens} tokens ({valid} valid), forward + backward, "
        f"median of {args.repeats}, {torch.get_num_threads()} threads\n"
    )
    print("| loss | ms | ratio to vanilla |")
    print("|---|---:|---:|")
    for n, t in results.items():
        print(f"| {n} | {t * 1e3:.1f} | {t / results['vanilla']:.2f} |")


if __name__ == "__main__":
    main()
