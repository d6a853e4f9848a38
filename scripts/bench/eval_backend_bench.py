"""Evaluation backend benchmark: the transformers backend against the vLLM backend (on a CPU, vLLM's
CPU build with the evaluation's CPU defaults), on the same prompts, in one run, one table.

What it does
  Renders N toy arithmetic test questions (recipes.tools.data.toy_arithmetic_pairs) under the qwen-math
  template with the model's chat template and tokenizes them once. Then, one backend after the
  other (each closed before the next starts), exactly as eval.run builds them (eval.backends):
    hf    loads the model (float32), warms up on 2 prompts, then generates greedy answers for all N
          prompts with each batch size given (batch 1: one `generate` per question);
    vllm  starts one engine (on a CPU: eager, KV cache 512 MiB, float32; the start-up includes
          vLLM's own warm-up), warms up on 2 prompts, then generates all N prompts in one call, as
          eval.run does for a greedy repeat.
  `start-up s` is loading the backend; `wall s` the timed generation; tokens/s counts generated
  tokens. `same text` is the share of answers identical to the first row's. The vLLM row ends with
  its speed-up in tokens/s over each transformers row.

Command (the tiny model, about 2-3 minutes on a 2-core machine, most of it vLLM's start-up; builds the
model on first use, ~45 s):
  .venv/bin/python scripts/bench/eval_backend_bench.py
  .venv/bin/python scripts/bench/eval_backend_bench.py --model PATH --questions 64 --batch-sizes 8,32
  .venv/bin/python scripts/bench/eval_backend_bench.py --backends hf     # transformers only

Hardware: CPU (or a GPU if torch and vLLM see one). On a CPU vLLM binds its compute threads to the
cores it is given and keeps one core for itself (vLLM's CPU defaults; VLLM_CPU_OMP_THREADS_BIND
changes it), while transformers uses every core torch sees. Writes nothing (stdout only).
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # the repo's `eval` package, installed or not

if TYPE_CHECKING:
    from eval.backends import Decoding


# (backend, batch label, start-up s, wall s, each prompt's first generation)
Row = tuple[str, str, float, float, list]


def parse_args() -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--model", help="HF model folder (default: the tiny model, built if missing)")
    ap.add_argument("--questions", type=int, default=64)
    ap.add_argument("--max-new-tokens", type=int, default=32)
    ap.add_argument("--max-model-len", type=int, default=1024, help="vLLM engine length (default 1024)")
    ap.add_argument("--batch-sizes", default="1,8,32", help="transformers batch sizes (1: per question)")
    ap.add_argument("--backends", default="hf,vllm", help="comma-separated, in this order (default hf,vllm)")
    ap.add_argument("--template", default="qwen-math")
    return ap.parse_args()


def measure(
    name: str, model: str, prompts: list[list[int]], decoding: Decoding, sizes: list[int], versions: list[str]
) -> list[Row]:
    """One backend's rows: started, warmed up, timed on every prompt (hf: at each batch size), closed.
    Adds the vLLM version to `versions`."""
    from eval.backends import make_backend

    rows = []
    t0 = time.perf_counter()
    backend = make_backend(name, model, decoding)
    startup = time.perf_counter() - t0
    try:
        backend.generate(prompts[:2], decoding)  # warm-up: first-call allocations are not measured
        if name == "hf":
            for b in sizes:
                backend.batch_size = b
                t0 = time.perf_counter()
                outs = backend.generate(prompts, decoding)
                label = "1 (per question)" if b == 1 else str(b)
                rows.append((name, label, startup, time.perf_counter() - t0, [o[0] for o in outs]))
        else:
            import vllm

            versions.append(f"vLLM {vllm.__version__}" + (" (CPU build)" if backend.on_cpu else ""))
            t0 = time.perf_counter()
            outs = backend.generate(prompts, decoding)
            rows.append(
                (name, f"all {len(prompts)}", startup, time.perf_counter() - t0, [o[0] for o in outs])
            )
    finally:
        backend.close()
    return rows


def print_table(rows: list[Row], n: int, max_new_tokens: int, model: str, versions: list[str]) -> None:
    print(
        f"\n# Evaluation backend benchmark: {n} questions, greedy, up to {max_new_tokens} new tokens, "
        f"{os.path.basename(model.rstrip('/'))}, {os.cpu_count()} cores, {', '.join(versions)}\n"
    )
    print("| backend | batch | start-up s | wall s | questions/s | tokens/s | same text as row 1 |")
    print("|---|---|---:|---:|---:|---:|---:|")
    ref = rows[0][4]
    for name, label, startup, wall, outs in rows:
        tokens = sum(g.tokens for g in outs)
        same = sum(g.text == r.text for g, r in zip(outs, ref, strict=True)) / n
        print(
            f"| {name} | {label} | {startup:.1f} | {wall:.2f} | {n / wall:.1f} | {tokens / wall:.0f} | {same:.0%} |"
        )
    print()


def _speed(row: Row) -> float:
    """Generated tokens a second."""
    return sum(g.tokens for g in row[4]) / row[3]


def print_speedups(rows: list[Row]) -> None:
    """vLLM over each transformers row; each transformers batch size over batch 1."""
    hf = [r for r in rows if r[0] == "hf"]
    for v in (r for r in rows if r[0] == "vllm"):
        for h in hf:
            print(f"speed-up of vLLM over transformers batch {h[1]}: {_speed(v) / _speed(h):.2f}x (tokens/s)")
    single = [h for h in hf if h[1].startswith("1 ")]
    for h in hf if single else []:
        if h is not single[0]:
            print(
                f"speed-up of transformers batch {h[1]} over per question: {_speed(h) / _speed(single[0]):.2f}x"
            )


def main() -> None:
    args = parse_args()

    import torch
    from transformers import AutoTokenizer

    from eval.backends import Decoding
    from eval.prompts import render_prompt
    from recipes.tools.data import toy_arithmetic_pairs
    from recipes.tools.models import ensure_model

    model = args.model or str(ensure_model("tiny"))
    _, test = toy_arithmetic_pairs(n_train=1, n_test=args.questions, seed=0)
    tok = AutoTokenizer.from_pretrained(model)
    prompts = [tok.encode(render_prompt(args.template, q, tok), add_special_tokens=False) for q, _ in test]
    decoding = Decoding(max_new_tokens=args.max_new_tokens, max_model_len=args.max_model_len)
    backends = [b.strip() for b in args.backends.split(",") if b.strip()]
    sizes = [int(b) for b in args.batch_sizes.split(",") if b.strip()]

    rows = []
    versions = [f"torch {torch.__version__} ({torch.get_num_threads()} threads)"]
    for name in backends:
        rows += measure(name, model, prompts, decoding, sizes, versions)
    print_table(rows, len(prompts), args.max_new_tokens, model, versions)
    print_speedups(rows)


if __name__ == "__main__":
    main()
