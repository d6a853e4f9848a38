"""What TA-GRPO costs per step next to GRPO with the same number of responses, on the CPU.

    .venv/bin/python scripts/bench/ta_grpo_bench.py [--steps 4]

Runs `python -m recipes.train experiment=demo_cpu` (verl's real trainer, tiny model, 4 questions x
8 responses per step) three times, one after the other:
  grpo                 method=[grpo]
  ta_grpo (anchored)   method=[grpo,ta_grpo], N=3 rephrasings, G=2, anchor=original
  ta_grpo (own)        the same with anchor=own (the authors' public code)
and prints, per run, the median over steps 2..N of the step time and of its phases, the number of
log-prob passes per step (each of verl's phases `old_log_prob`, `ref` and `update_actor` is one
forward pass over the step's batch; a missing phase would read 2, an extra one 4) and the tokens
per pass (`perf/total_num_tokens`), with the ratio to GRPO. Anchoring replaces the prompt tokens
of each rephrasing's responses by q0's: it adds no pass, only changes which prompt tokens are in
it. Writes nothing outside a temporary folder. Needs no GPU (about 5 minutes on 2 cores).
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
PASSES = ("timing_s/old_log_prob", "timing_s/ref", "timing_s/update_actor")
PHASES = ("timing_s/step", "timing_s/gen", *PASSES)
RUNS = {
    "grpo": ["method=[grpo]"],
    "ta_grpo (anchored)": ["method=[grpo,ta_grpo]", "recipes.ta_grpo.anchor=original"],
    "ta_grpo (own)": ["method=[grpo,ta_grpo]", "recipes.ta_grpo.anchor=own"],
}


def run(name: str, overrides: list[str], steps: int, root: Path) -> dict[str, float]:
    out = root / "".join(c if c.isalnum() else "_" for c in name)
    args = [
        sys.executable, "-m", "recipes.train", "experiment=demo_cpu", *overrides,
        f"trainer.total_training_steps={steps}", "trainer.save_freq=-1", f"recipes.output_dir={out}",
        "recipes.step_table=false",
    ]  # fmt: skip
    proc = subprocess.run(args, cwd=REPO, capture_output=True, text=True)
    if proc.returncode:
        sys.exit(f"{name} failed:\n{proc.stderr[-3000:]}")
    lines = next((out / "metrics").glob("*.jsonl")).read_text().splitlines()
    records = [json.loads(line)["data"] for line in lines][1:]  # step 1 includes warm-up
    result = {k: statistics.median(r[k] for r in records) for k in PHASES}
    result["passes"] = statistics.median(sum(k in r for k in PASSES) for r in records)
    result["tokens"] = statistics.median(r["perf/total_num_tokens"] for r in records)
    result["prompt_len"] = statistics.median(r["prompt_length/mean"] for r in records)
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--steps", type=int, default=4, help="steps per run; step 1 is not counted")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        results = {name: run(name, overrides, args.steps, Path(tmp)) for name, overrides in RUNS.items()}
    base = results["grpo"]
    print(f"demo_cpu, 4 questions x 8 responses, median of steps 2-{args.steps}\n")
    print(
        "| run | log-prob passes | tokens/pass | prompt len | s/step | ratio | gen s | old_log_prob s | ref s | update s |"
    )
    print("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
    for name, r in results.items():
        print(
            f"| {name} | {r['passes']:.0f} | {r['tokens']:.0f} | {r['prompt_len']:.0f} | "
            f"{r['timing_s/step']:.2f} | {r['timing_s/step'] / base['timing_s/step']:.2f} | "
            f"{r['timing_s/gen']:.2f} | {r['timing_s/old_log_prob']:.2f} | {r['timing_s/ref']:.2f} | "
            f"{r['timing_s/update_actor']:.2f} |"
        )


if __name__ == "__main__":
    main()
