"""What a ProRL reference reset costs, next to a checkpoint save, on the CPU.

    .venv/bin/python scripts/bench/prorl_reset_bench.py [--steps 4] [--models tiny smollm2_135m]

For each model, runs `python -m recipes.train` (verl's real trainer; experiment demo_cpu for the
tiny model, demo_cpu_smollm2 for SmolLM2-135M) with method=[grpo,prorl], a reset after every step
and a checkpoint after every step, and prints the medians over steps 2..N of
  reset        timing_s/prorl_reset: the worker copies every actor shard into the reference and
               clears the optimizer state (one Ray call to the worker group)
  snapshot     timing_s/prorl_snapshot: writing the reference's shards into the checkpoint
  checkpoint   timing_s/save_checkpoint: the whole save (verl's model + optimizer + extra state,
               our state files and the snapshot)
  step         timing_s/step
and the ratio reset / checkpoint. The last column is what a user without this feature would pay
instead: stop the run and launch it again with the reference set to the latest checkpoint, i.e.
one launch's start-up and teardown (the launch's wall time minus its steps' time; it does not
count converting the checkpoint to HuggingFace, which that route also needs). Writes nothing
outside a temporary folder. Needs no GPU (about 6 minutes on 2 cores with both models).
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
EXPERIMENT = {"tiny": "demo_cpu", "smollm2_135m": "demo_cpu_smollm2"}
PARAMS = {"tiny": "123K", "smollm2_135m": "135M"}
KEYS = ("timing_s/prorl_reset", "timing_s/prorl_snapshot", "timing_s/save_checkpoint", "timing_s/step")


def run(model: str, steps: int, root: Path) -> dict[str, float]:
    out = root / model
    args = [
        sys.executable, "-m", "recipes.train", f"experiment={EXPERIMENT[model]}", "method=[grpo,prorl]",
        "recipes.prorl.reset_every=1", f"trainer.total_training_steps={steps}", "trainer.save_freq=1",
        "data.max_response_length=16", f"recipes.output_dir={out}", "recipes.step_table=false",
    ]  # fmt: skip
    t0 = time.perf_counter()
    proc = subprocess.run(args, cwd=REPO, capture_output=True, text=True)
    wall = time.perf_counter() - t0
    if proc.returncode:
        sys.exit(f"{model} failed:\n{proc.stderr[-3000:]}")
    lines = next((out / "metrics").glob("*.jsonl")).read_text().splitlines()
    records = [json.loads(line)["data"] for line in lines]
    result = {k: statistics.median(r[k] for r in records[1:]) for k in KEYS}  # step 1 warms up
    result["launch"] = wall - sum(r["timing_s/step"] for r in records)
    return result


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--steps", type=int, default=4, help="training steps per run (>= 2)")
    parser.add_argument("--models", nargs="+", default=list(EXPERIMENT), choices=list(EXPERIMENT))
    args = parser.parse_args()
    if args.steps < 2:
        parser.error("--steps must be >= 2 (step 1 is left out of the medians)")
    with tempfile.TemporaryDirectory() as tmp:
        results = {m: run(m, args.steps, Path(tmp)) for m in args.models}
    print(f"ProRL reset vs checkpoint save, CPU, medians of steps 2..{args.steps} (seconds)\n")
    print("| model | params | reset | snapshot | checkpoint | step | reset / checkpoint | relaunch |")
    print("|---|---|---:|---:|---:|---:|---:|---:|")
    for m, r in results.items():
        ratio = r["timing_s/prorl_reset"] / r["timing_s/save_checkpoint"]
        print(
            f"| {m} | {PARAMS[m]} | {r['timing_s/prorl_reset']:.4f} | {r['timing_s/prorl_snapshot']:.4f} | "
            f"{r['timing_s/save_checkpoint']:.3f} | {r['timing_s/step']:.2f} | {ratio:.3f} | {r['launch']:.1f} |"
        )


if __name__ == "__main__":
    main()
