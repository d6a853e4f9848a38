"""Evaluate one HuggingFace model on the math benchmarks: greedy avg@R or sampled pass@k.

    python -m eval.run --model PATH --out results/NAME                      # the paper's evaluation
    python -m eval.run --model PATH --out DIR --protocol cw_grpo            # another paper's evaluation
    python -m eval.run --model PATH --out DIR --benchmarks aime24,aime25,amc,olympiadbench,minerva,gpqa_diamond \\
        --decoding sample --n 32 --k 1,2,4,8,16,32                          # pass@k of your choosing
    python -m eval.run --model PATH --out DIR --data-dir DATA_DIR --backend hf --limit 20  # local JSONL files

The defaults are the prompt-augmentation paper's evaluation (greedy avg@5 of the `qwen-math`
template on AIME24, AMC, MATH500, Minerva and OlympiadBench, the last `\\boxed{}` graded);
`--protocol NAME` sets another paper's (recipes/protocols.py; options given beside it win, and the
results record which). It writes
OUT/samples.jsonl (every sample, appended as generated), OUT/summary.json, OUT/table.md,
OUT/config.json and OUT/runs.jsonl; rerunning the same command resumes without generating a
finished sample again. Backends: vLLM (a GPU, or vLLM's CPU build) or transformers (`--backend hf`).
docs/eval.md has the table's format, every option and what each file holds.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from eval import benchmarks as bm
from eval.backends import progress_bars
from eval.generate import generate_missing
from eval.options import add_eval_arguments, byte_size, eval_kwargs, int_in, number_in, protocol_note
from eval.plan import plan_samples, sample_settings
from eval.prompts import render_prompt
from eval.request import EvalError, EvalRequest, check_template, default_backend, validate
from eval.results import ResultsError
from eval.summary import summary_settings, write_summary

# The program is split by stage (eval/request.py, options.py, prompts.py, plan.py, generate.py,
# summary.py); the names other code imported from here before the split stay importable.
__all__ = [
    "EvalError",
    "EvalRequest",
    "add_eval_arguments",
    "byte_size",
    "check_template",
    "default_backend",
    "eval_kwargs",
    "evaluate",
    "int_in",
    "main",
    "number_in",
    "protocol_note",
    "render_prompt",
    "run_request",
    "sample_settings",
    "summary_settings",
]


def evaluate(
    model: str | os.PathLike,
    out: str | os.PathLike,
    benchmarks: Sequence[str] = bm.DEFAULT_SUITE,
    **options: Any,
) -> dict:
    """Evaluate `model` into `out` (module docstring) and return the summary; `options` are
    EvalRequest's keyword fields. Resumes whatever `out` holds."""
    return run_request(EvalRequest(model, out, benchmarks, **options))


def run_request(request: EvalRequest) -> dict:
    """Check the request, plan what `out` still lacks, generate it, write and return the summary."""
    req = request.resolved()
    validate(req)
    with progress_bars(req.progress, hub=req.data_dir is None):
        plan = plan_samples(req)
        total, todo = len(plan.missing) * req.runs, plan.todo
        if not req.quiet:
            print(
                f"[eval] {req.model} -> {req.out}: {total - todo} of {total} samples done, {todo} to generate",
                flush=True,
            )
        started = time.time()
        generated = generate_missing(req, plan) if todo else 0
    return write_summary(req, plan, started=started, generated=generated, skipped=total - todo)


def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(
        prog="python -m eval.run",
        description=__doc__.split("\n\n")[0],
        formatter_class=argparse.RawDescriptionHelpFormatter,
        epilog="examples:\n  python -m eval.run --model outputs/run/hf/global_step_100\n  python -m eval.run --model MODEL --protocol cw_grpo\n  python -m eval.run --model MODEL --benchmarks aime24,math500 --decoding sample --n 16\n(docs/eval.md)",
    )
    p.add_argument("--model", required=True, help="a HuggingFace model folder")
    p.add_argument(
        "--out", help="results folder (default results/<model folder name>); never inside the model"
    )
    add_eval_arguments(p)
    args = p.parse_args(argv)
    out = args.out or str(Path("results") / Path(args.model).resolve().name)
    try:
        kwargs = eval_kwargs(args)
        note = protocol_note(kwargs)
        if note:
            print(note, file=sys.stderr, flush=True)
        summary = evaluate(args.model, out, **kwargs)
    except (EvalError, bm.BenchmarkError, ResultsError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    return 0 if summary["complete"] else 1


if __name__ == "__main__":
    sys.exit(main())
