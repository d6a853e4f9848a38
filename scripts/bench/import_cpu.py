"""CPU time of the imports every test process and Ray worker starts with, per Python interpreter.

Most of `make test`'s CPU time is processes importing torch, transformers, verl and vLLM (a
training launch starts about a dozen). This times that import under each interpreter given, in
turn, and prints a table with the ratio to the first; `make setup` picks its interpreter from
such a measurement (docs/testing.md, "The interpreter").

Command (about 1 minute on 2 cores; each interpreter needs the project's packages importable, so
pass the `bin/python` of a venv built from it):
  python scripts/bench/import_cpu.py .venv/bin/python /path/to/other-venv/bin/python --rounds 4

Hardware: CPU only. Writes nothing (stdout only).
"""

from __future__ import annotations

import argparse
import os
import resource
import statistics
import subprocess

IMPORTS = "import verl.workers.fsdp_workers, vllm"


def cpu_seconds(python: str) -> float:
    """User + system CPU seconds of one fresh interpreter doing IMPORTS (its children included)."""
    env = {**os.environ, "VERL_USE_EXTERNAL_PLUGINS": "none"}  # verl alone, not our plugin
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    proc = subprocess.run([python, "-c", IMPORTS], env=env, capture_output=True, text=True)
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if proc.returncode != 0:
        raise SystemExit(f"{python}: the imports failed: {proc.stderr.strip().splitlines()[-1:]}")
    return after.ru_utime + after.ru_stime - before.ru_utime - before.ru_stime


def describe(python: str) -> str:
    """The interpreter's version and the executable the venv links to."""
    code = "import os, platform, sys; print(platform.python_version(), os.path.realpath(sys.executable))"
    return subprocess.run([python, "-c", code], capture_output=True, text=True).stdout.strip()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("pythons", nargs="+", help="interpreters (a venv's bin/python each)")
    ap.add_argument("--rounds", type=int, default=4, help="imports per interpreter, interleaved (default 4)")
    args = ap.parse_args()
    times: dict[str, list[float]] = {p: [] for p in args.pythons}
    for _ in range(args.rounds):  # interleaved, so a busy moment hits every interpreter alike
        for p in args.pythons:
            times[p].append(cpu_seconds(p))
    base = statistics.median(times[args.pythons[0]])
    print(f"# CPU seconds of `{IMPORTS}`, median of {args.rounds}, {os.cpu_count()} cores\n")
    print("| interpreter | version, executable | CPU s | ratio to the first |")
    print("|---|---|---:|---:|")
    for p, xs in times.items():
        m = statistics.median(xs)
        print(f"| `{p}` | {describe(p)} | {m:.2f} | {m / base:.2f} |")


if __name__ == "__main__":
    main()
