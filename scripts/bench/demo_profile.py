"""Profile the CPU demo: start-up time, seconds per step (split into generation, actor update and
the rest) and peak memory of `python -m recipes.train experiment=demo_cpu` (verl's real trainer
on the CPU, rolling out through verl's vLLM server on vLLM's CPU build).

    .venv/bin/python scripts/bench/demo_profile.py                      # MODEL=tiny
    .venv/bin/python scripts/bench/demo_profile.py experiment=demo_cpu_smollm2

Runs the demo once in a fresh output folder, sampling every 0.5 s the resident memory of all
processes it starts (the driver, Ray and its workers), and prints a table. Start-up is the time
from launch to the end of step 1 minus step 1's own time; the tiny model and the data are built
first, outside the timing. Writes nothing outside a temporary folder. Needs no GPU.
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

import psutil

REPO = Path(__file__).resolve().parents[2]


def descendants_rss(root: psutil.Process) -> int:
    """Summed RSS of `root` and its descendants (a launch's Ray processes are among them)."""
    total = 0
    for p in [root, *root.children(recursive=True)]:
        try:
            total += p.memory_info().rss
        except psutil.Error:
            continue
    return total


def tree_rss(root: psutil.Process, started: float) -> int:
    """RSS of `root`'s descendants plus every other Ray process created after `started`."""
    mine = {root.pid, *(p.pid for p in root.children(recursive=True))}
    total = descendants_rss(root)
    for p in psutil.process_iter(["name", "cmdline", "create_time"]):
        try:
            if (
                p.pid not in mine
                and p.info["create_time"] >= started
                and any("ray" in c for c in (p.info["cmdline"] or []))
            ):
                total += p.memory_info().rss
        except psutil.Error:
            continue
    return total


def main(overrides: list[str]) -> None:
    overrides = overrides or ["experiment=demo_cpu"]
    from recipes.train import check_overrides, prepare

    cfg = check_overrides(overrides)  # a bad override: one `config error:` line and exit 2, here
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "run"
        cmd = [sys.executable, "-m", "recipes.train", *overrides, f"recipes.output_dir={out}"]
        prepare(cfg)  # build the model and data first: they do not count as start-up
        started = time.time()
        log_file = (Path(tmp) / "log.txt").open("w+")  # a file, not a pipe: nobody reads while it runs
        proc = subprocess.Popen(cmd, cwd=REPO, stdout=log_file, stderr=subprocess.STDOUT, text=True)
        root = psutil.Process(proc.pid)
        peak, step1_end = 0, None
        while proc.poll() is None:
            peak = max(peak, tree_rss(root, started))
            if step1_end is None and any((out / "metrics").glob("*.jsonl")):
                f = next((out / "metrics").glob("*.jsonl"))
                if f.read_text().strip():
                    step1_end = time.time()
            time.sleep(0.5)
        wall = time.time() - started
        log_file.seek(0)
        log = log_file.read()
        if proc.returncode != 0:
            sys.exit(f"demo failed ({proc.returncode}):\n{log[-3000:]}")
        records = [
            json.loads(line) for f in (out / "metrics").glob("*.jsonl") for line in f.read_text().splitlines()
        ]
        records.sort(key=lambda r: r["step"])
        steps = [r["data"]["timing_s/step"] for r in records]
        startup = step1_end - started - steps[0]
        print(log[log.find("step  reward") :].strip())
        print()

        def later(key: str) -> float:  # median over steps 2+ (step 1 pays one-time costs)
            values = [r["data"].get(key, 0.0) for r in records[1:]]
            return statistics.median(values) if values else float("nan")

        step, gen, update = later("timing_s/step"), later("timing_s/gen"), later("timing_s/update_actor")
        from recipes.platforms.cpu import describe_cpu

        print(f"CPU: {describe_cpu()}")
        print(
            "| command | start-up s | step 1 s | s/step | generation | actor update | other | wall s "
            "| peak RSS GiB |"
        )
        print("|---|---:|---:|---:|---:|---:|---:|---:|---:|")
        print(
            f"| {' '.join(overrides)} | {startup:.1f} | {steps[0]:.1f} | {step:.2f} | {gen:.2f} | {update:.2f} "
            f"| {step - gen - update:.2f} | {wall:.1f} | {peak / 2**30:.2f} |"
        )
        print("(s/step and its split: medians over steps 2+; generation is verl's timing_s/gen, the actor")
        print(" update timing_s/update_actor, other the rest: log-probs, reference, reward, weight sync)")


def parse(argv: list[str]) -> list[str]:
    """The Hydra overrides; --help, and any other option refused in one line (exit 2): an option
    would otherwise reach Hydra as an override and end in its traceback."""
    p = argparse.ArgumentParser(
        prog="python scripts/bench/demo_profile.py",
        description=__doc__.split("\n\n")[0],
        epilog="exit status: 0 the table printed; 1 the demo failed (its log's tail shown); 2 bad input",
    )
    p.add_argument(
        "overrides",
        nargs="*",
        metavar="KEY=VALUE",
        help="recipes.train overrides (default experiment=demo_cpu)",
    )
    return p.parse_args(argv).overrides


if __name__ == "__main__":
    main(parse(sys.argv[1:]))
