"""Evaluation backend benchmark: the HF backend's batched generation against per-question generation
(one `model.generate` per question, what a user writes by hand), on the same questions, in one run.

What it does
  Renders N toy arithmetic test questions (recipes.data.toy_arithmetic_pairs) under the qwen-math
  template with the model's chat template, loads the model once (transformers, float32), warms it
  up, then generates greedy answers for all N questions per question (batch 1) and in batches of
  each given size, timing each pass. Prints a markdown table and the speed-up of each batch size
  over per-question generation; `same text` is the share of answers identical to the per-question
  ones (left padding can change low-order bits of the logits, so a few may differ).

Command (the tiny model, about 1 minute on a 2-core machine; builds it on first use, ~45 s):
  .venv/bin/python scripts/bench/eval_backend_bench.py
  .venv/bin/python scripts/bench/eval_backend_bench.py --model PATH --questions 64 --batch-sizes 8,32

Hardware: CPU (or a GPU if torch sees one). Writes nothing (stdout only).
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # the repo's `eval` package, installed or not


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--model", help="HF model folder (default: the tiny model, built if missing)")
    ap.add_argument("--questions", type=int, default=64)
    ap.add_argument("--max-new-tokens", type=int, default=32)
    ap.add_argument("--batch-sizes", default="8,32", help="comma-separated batch sizes to compare")
    ap.add_argument("--template", default="qwen-math")
    args = ap.parse_args()

    import torch

    from eval.backends import Decoding, HFBackend
    from eval.run import render_prompt
    from recipes.data import toy_arithmetic_pairs
    from recipes.models import ensure_model

    model = args.model or str(ensure_model("tiny"))
    _, test = toy_arithmetic_pairs(n_train=1, n_test=args.questions, seed=0)
    backend = HFBackend(model, batch_size=1)
    tok = backend.tokenizer
    prompts = [tok.encode(render_prompt(args.template, q, tok), add_special_tokens=False) for q, _ in test]
    decoding = Decoding(max_new_tokens=args.max_new_tokens, max_model_len=4096)
    backend.generate(prompts[:2], decoding)  # warm-up: first-call allocations are not what we measure

    def timed(batch_size: int):
        backend.batch_size = batch_size
        t0 = time.perf_counter()
        outs = backend.generate(prompts, decoding)
        return time.perf_counter() - t0, [o[0] for o in outs]

    sizes = [int(b) for b in args.batch_sizes.split(",") if b.strip()]
    base_s, base = timed(1)
    rows = [("per-question (batch 1)", 1, base_s, base)]
    for b in sizes:
        s, outs = timed(b)
        rows.append((f"batched (batch {b})", b, s, outs))

    n = len(prompts)
    print(
        f"# Evaluation backend benchmark: {n} questions, greedy, up to {args.max_new_tokens} new tokens, "
        f"{os.path.basename(model.rstrip('/'))}, {os.cpu_count()} cores, torch {torch.__version__} "
        f"({torch.get_num_threads()} threads)\n"
    )
    print("| mode | batch | wall s | questions/s | tokens/s | same text as per-question |")
    print("|---|---:|---:|---:|---:|---:|")
    for name, b, s, outs in rows:
        tokens = sum(g.tokens for g in outs)
        same = sum(g.text == ref.text for g, ref in zip(outs, base, strict=True)) / n
        print(f"| {name} | {b} | {s:.2f} | {n / s:.1f} | {tokens / s:.0f} | {same:.0%} |")
    print()
    for _, b, s, _ in rows[1:]:
        print(f"speed-up of batched generation (batch {b}) over per-question: {base_s / s:.2f}x")


if __name__ == "__main__":
    main()
