"""CW-GRPO's policy loss next to verl's `vanilla` and `clip_cov`, on the same tensors, on the CPU or a GPU.

    .venv/bin/python scripts/bench/cw_grpo_bench.py [--responses 64] [--tokens 4096] [--repeats 41]
        [--device cpu|cuda]

Builds one batch (responses x tokens, random lengths from a quarter to all of the tokens, GRPO-style
advantages constant per response, float32), then for each loss times forward + backward through
the log-probs (the loss alone: no model), median of --repeats rounds (the losses take turns within
a round) after one warm-up, and prints a table with the ratio to `vanilla`. Single process, torch's default CPU threads. Writes nothing.
On a GPU each time is taken between two synchronizations, and a line first compares the weights w~
computed there from float32 and bfloat16 log-probs with float64 weights computed on the CPU.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))


def cw_grpo():
    """recipes.methods.cw_grpo, which registers the cw_grpo losses with verl: imported when first
    needed, so that --help and a bad argument answer without importing verl (~7 s)."""
    import recipes.methods.cw_grpo as cw

    return cw


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


def sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def time_once(fn, tensors) -> float:
    old, log_prob, adv, mask = tensors
    lp = log_prob.clone().requires_grad_(True)
    sync(lp.device)
    t0 = time.perf_counter()
    loss, _ = fn(old, lp, adv, mask, loss_agg_mode="token-mean", config=Cfg())
    loss.backward()
    sync(lp.device)
    return time.perf_counter() - t0


def weights_error(tensors, device: torch.device) -> str:
    """Largest |w~ - w~_ref| over the valid tokens, w~ from float32 and from bfloat16 log-probs on
    `device` against float64 on the CPU from the same (rounded) log-probs: the error of the
    statistics themselves, which cw_weights keeps in float32 at least."""
    _, log_prob, adv, mask = (t.cpu() for t in tensors)
    cw = cw_grpo()
    parts = []
    for dtype in (torch.float32, torch.bfloat16):
        lp = log_prob.to(dtype)
        ref = cw.cw_weights(lp.double(), adv.double(), mask)[0]
        w = cw.cw_weights(lp.to(device), adv.to(device), mask.to(device))[0].cpu().double()
        parts.append(f"{dtype}: {((w - ref).abs() * mask).max().item():.2e}")
    return f"w~ on {device} vs float64 on the CPU, largest difference: " + ", ".join(parts)


def time_losses(names: list[str], tensors, repeats: int) -> dict[str, float]:
    """Median seconds per loss; the losses take turns, so drift in the machine's speed hits all."""
    from verl.trainer.ppo.core_algos import get_policy_loss_fn

    cw_grpo()
    fns = {n: get_policy_loss_fn(n) for n in names}
    for fn in fns.values():  # warm-up
        time_once(fn, tensors)
    times: dict[str, list[float]] = {n: [] for n in names}
    for _ in range(repeats):
        for n, fn in fns.items():
            times[n].append(time_once(fn, tensors))
    return {n: statistics.median(t) for n, t in times.items()}


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--responses", type=int, default=64)
    parser.add_argument("--tokens", type=int, default=4096)
    parser.add_argument("--repeats", type=int, default=41)
    parser.add_argument("--device", default="cpu", choices=["cpu", "cuda"], help="(default cpu)")
    args = parser.parse_args(argv)
    device = torch.device(args.device)
    tensors = tuple(t.to(device) for t in batch(args.responses, args.tokens))
    if device.type != "cpu":
        print(weights_error(tensors, device))
    names = ["vanilla", "clip_cov", "cw_grpo", "cw_grpo-seqlogp-allpos-grad"]
    results = time_losses(names, tensors, args.repeats)
    valid = int(tensors[3].sum())
    where = (
        torch.cuda.get_device_name(device) if device.type == "cuda" else f"{torch.get_num_threads()} threads"
    )
    print(
        f"{args.responses} responses x {args.tokens} tokens ({valid} valid), forward + backward, "
        f"median of {args.repeats}, {where}\n"
    )
    print("| loss | ms | ratio to vanilla |")
    print("|---|---:|---:|")
    for n, t in results.items():
        print(f"| {n} | {t * 1e3:.1f} | {t / results['vanilla']:.2f} |")


if __name__ == "__main__":
    main()
