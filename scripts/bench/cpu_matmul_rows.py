"""Whether this CPU's vLLM linear layers give a row the same bits whatever the batch, and what
making them so would cost (docs/running.md#reproducibility-the-same-seed-the-same-run).

    .venv/bin/python scripts/bench/cpu_matmul_rows.py [--rows 600]

vLLM's CPU build computes its float32 linear layers with oneDNN (`ops.onednn_mm`). For each of
SmolLM2-135M's layer shapes, the first table counts the calls of 1..ROWS rows in which some row
differs, in any bit, from the same row computed alone (0 everywhere: a request's log-probs do not
depend on its batch), and the first row count where one does. The second table times one forward
pass's linear layers (30 blocks of q/k/v, o, gate/up and down projections, and the LM head) at a
given row count: as vLLM calls them, and cut into calls of at most 48 rows, each padded to a
multiple of 6, which on an AVX2-only AMD EPYC gave every row the same bits in any batch (the
first table's "invariant" column for that scheme). Median of 3, on every core.
"""

from __future__ import annotations

import argparse
import statistics
import time

HIDDEN, INTERMEDIATE = 576, 1536
SHAPES = {"qkv": (960, HIDDEN), "o": (HIDDEN, HIDDEN), "gate_up": (2 * INTERMEDIATE, HIDDEN)}
SHAPES |= {"down": (HIDDEN, INTERMEDIATE), "lm_head": (49152, HIDDEN)}
PER_FORWARD = {"qkv": 30, "o": 30, "gate_up": 30, "down": 30, "lm_head": 1}
MOST, TILE = 48, 6


def in_fixed_calls(linear):
    """`linear` on calls of at most MOST rows, each padded with zero rows to a multiple of TILE."""
    import torch

    def call(x):
        outs = []
        for start in range(0, x.shape[0], MOST):
            chunk = x[start : start + MOST]
            pad = -len(chunk) % TILE
            if pad:
                chunk = torch.cat([chunk, chunk.new_zeros(pad, chunk.shape[1])])
            outs.append(linear(chunk)[: len(chunk) - pad])
        return torch.cat(outs)

    return call


def onednn_linear(n: int, k: int, generator):
    """A random float32 layer of `n` outputs and `k` inputs as vLLM's CPU build calls it."""
    import torch
    from vllm import _custom_ops as ops

    mm = ops.create_onednn_mm((torch.randn(n, k, generator=generator) / k**0.5).t(), 32)
    return lambda x: ops.onednn_mm(mm, x.contiguous(), None)


def differing_calls(linear, x, counts) -> list[int]:
    """The row counts m in `counts` whose call on x[:m] gives some row other bits than that row
    computed alone."""
    import torch

    alone = torch.cat([linear(x[i : i + 1]) for i in range(max(counts))])
    return [m for m in counts if not torch.equal(linear(x[:m]), alone[:m])]


def seconds(fn, x, repeats: int = 3) -> float:
    fn(x)
    times = []
    for _ in range(repeats):
        t = time.perf_counter()
        fn(x)
        times.append(time.perf_counter() - t)
    return statistics.median(times)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rows", type=int, default=600, help="largest row count checked")
    args = ap.parse_args()

    import torch

    from recipes.platforms.cpu import describe_cpu

    g = torch.Generator().manual_seed(0)
    linears = {name: onednn_linear(n, k, g) for name, (n, k) in SHAPES.items()}

    print(f"{describe_cpu()}; vLLM's oneDNN float32 linear layers")
    print(
        f"\n| layer | shape | calls of 1-{args.rows} rows with a row changed: as is | first | in {MOST}-row calls |"
    )
    print("|---|---|---:|---:|---:|")
    for name, (n, k) in SHAPES.items():
        x = torch.randn(args.rows if n < 10_000 else min(args.rows, 200), k, generator=g)
        counts = range(1, len(x) + 1)
        plain = differing_calls(linears[name], x, counts)
        fixed = differing_calls(in_fixed_calls(linears[name]), x, counts)
        print(
            f"| {name} | {n}x{k} | {len(plain)} of {len(x)} | {plain[0] if plain else '-'} | {len(fixed)} |"
        )

    print(f"\n| rows | one forward's linear layers, as is (ms) | in {MOST}-row calls (ms) | ratio |")
    print("|---:|---:|---:|---:|")
    for m in (1, 4, 16, 64, 256, 1024):
        t_plain = t_fixed = 0.0
        for name, (_, k) in SHAPES.items():
            x = torch.randn(m, k, generator=g)
            t_plain += seconds(linears[name], x) * PER_FORWARD[name]
            t_fixed += seconds(in_fixed_calls(linears[name]), x) * PER_FORWARD[name]
        print(f"| {m} | {t_plain * 1e3:.1f} | {t_fixed * 1e3:.1f} | {t_fixed / t_plain:.2f} |")


if __name__ == "__main__":
    main()
