"""Why platform=cpu trains in float32: this CPU's matmul speed in float32 and in bfloat16, and the
dtype the platform chose for verl's FSDP engines (blocker 13 of docs/cpu_platform.md).

    .venv/bin/python scripts/bench/cpu_precision.py [--size 1024] [--repeats 3]

Prints the CPU model and instruction set, then a table: dtype, GFLOPS (best of the repeats), and
the ratio to float32. On a CPU without AMX or AVX512-BF16 bf16 has no fast kernels.
"""

from __future__ import annotations

import argparse
import time


def gflops(dtype, size: int, repeats: int) -> float:
    import torch

    a = torch.randn(size, size).to(dtype)
    b = torch.randn(size, size).to(dtype)
    a @ b  # warm-up
    best = float("inf")
    for _ in range(repeats):
        t = time.perf_counter()
        a @ b
        best = min(best, time.perf_counter() - t)
    return 2 * size**3 / best / 1e9


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--size", type=int, default=1024, help="square matrix size")
    ap.add_argument("--repeats", type=int, default=3)
    args = ap.parse_args()

    import torch

    from recipes.platforms.cpu import check_precision, describe_cpu
    from recipes.train import compose

    print(f"CPU: {describe_cpu()} (torch {torch.__version__})")
    print(f"platform=cpu trains in: {check_precision(compose(['experiment=demo_cpu']))}\n")
    rows = [
        (name, gflops(dtype, args.size, args.repeats))
        for name, dtype in (("float32", torch.float32), ("bfloat16", torch.bfloat16))
    ]
    base = rows[0][1]
    print(f"| dtype | {args.size}x{args.size} matmul GFLOPS | vs float32 |")
    print("|---|---:|---:|")
    for name, value in rows:
        print(f"| {name} | {value:.1f} | {value / base:.3f}x |")


if __name__ == "__main__":
    main()
