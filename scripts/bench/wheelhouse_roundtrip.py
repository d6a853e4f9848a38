"""The offline wheelhouse's round trip, measured: build the CPU environment's wheelhouse from PyPI,
split into parts, install it into a fresh virtualenv with no index, and run the fast tests there.

    python scripts/bench/wheelhouse_roundtrip.py [--split-mb 60] [--python python3] [--work DIR] [--keep]

Steps, each timed (scripts/wheelhouse.sh does the work):
  build    `wheelhouse.sh build W --extra cpu --split-mb N`, with a fresh, empty pip cache and pip's
           configuration files and PIP_* index variables set aside, so every wheel comes from PyPI
           as on a login node seen for the first time
  install  `wheelhouse.sh install W --venv V`: checks, reassembly of the split wheels, and
           `pip install --no-index --find-links` into a new virtualenv (no network used)
  tests    `V/bin/python -m pytest -m "not slow and not e2e"` from the repository root

Prints one table: the wheelhouse's size, wheel and part counts, largest part, the time of each step,
the installed environment's size and the tests' result. Needs PyPI and about 14 GB under --work
(the 3.4 GB wheelhouse, its reassembled wheels, the 7 GB environment; default: a temporary folder,
removed unless --keep). Measured on 2 cores: 1.4 min to build, 2.3 to install, 2.9 for the tests
(docs/slurm.md). Not part of `make test`: it downloads gigabytes.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
SCRIPT = REPO / "scripts" / "wheelhouse.sh"
PIP_SETTINGS = ("PIP_FIND_LINKS", "PIP_INDEX_URL", "PIP_EXTRA_INDEX_URL", "PIP_CONSTRAINT", "PIP_NO_INDEX")


def pypi_only_env(cache: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in PIP_SETTINGS and k != "VIRTUAL_ENV"}
    env["PIP_CONFIG_FILE"] = os.devnull
    env["PIP_CACHE_DIR"] = str(cache)
    return env


def timed(cmd: list[str], env: dict[str, str], log: Path, cwd: Path = REPO) -> tuple[int, float]:
    start = time.monotonic()
    with open(log, "w") as out:
        rc = subprocess.run(cmd, cwd=cwd, env=env, stdout=out, stderr=subprocess.STDOUT).returncode
    return rc, time.monotonic() - start


def tree_bytes(path: Path) -> int:
    return sum(p.stat().st_size for p in path.rglob("*") if p.is_file() and not p.is_symlink())


def pytest_summary(log: Path) -> str:
    """pytest's final count line, e.g. '594 passed, 84 deselected in 249.15s (0:04:09)'."""
    lines = [ln.strip("= ") for ln in log.read_text(errors="replace").splitlines()]
    found = [ln for ln in lines if re.match(r"^\d+ (passed|failed|errors?)\b.* in [\d.]+s", ln)]
    return found[-1] if found else "(no pytest summary: see the log)"


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--split-mb", type=int, default=60)
    p.add_argument("--python", default="python3", help="interpreter to build for and install with")
    p.add_argument("--work", help="folder for the wheelhouse, the venv and the logs (default: temporary)")
    p.add_argument("--keep", action="store_true", help="keep --work's temporary folder")
    return p.parse_args(argv)


def build(house: Path, split_mb: int, py: str, env: dict[str, str], logs: Path) -> float | None:
    """`wheelhouse.sh build`; its seconds, or None (said on stderr) when it failed."""
    rc, build_s = timed(
        [
            "bash",
            str(SCRIPT),
            "build",
            str(house),
            "--extra",
            "cpu",
            "--split-mb",
            str(split_mb),
            "--python",
            py,
        ],
        env,
        logs / "build.log",
    )
    if rc:
        print(f"build failed (exit {rc}): {logs / 'build.log'}", file=sys.stderr)
        return None
    return build_s


def install(house: Path, venv: Path, py: str, env: dict[str, str], logs: Path) -> float | None:
    """`wheelhouse.sh install` into a new venv; its seconds, or None (said on stderr) when it failed."""
    rc, install_s = timed(
        ["bash", str(SCRIPT), "install", str(house), "--venv", str(venv), "--python", py],
        env,
        logs / "install.log",
    )
    if rc:
        print(f"install failed (exit {rc}): {logs / 'install.log'}", file=sys.stderr)
        return None
    return install_s


def run_tests(venv: Path, logs: Path) -> tuple[int, float]:
    """The fast tests with the venv's interpreter, from the repository root: (exit status, seconds)."""
    test_env = {k: v for k, v in os.environ.items() if k != "VIRTUAL_ENV"}
    test_env["PATH"] = f"{venv / 'bin'}{os.pathsep}{test_env.get('PATH', '')}"
    return timed(
        [
            str(venv / "bin" / "python"),
            "-m",
            "pytest",
            "-m",
            "not slow and not e2e",
            "-q",
            "-p",
            "no:cacheprovider",
        ],
        test_env,
        logs / "tests.log",
    )


def print_table(rows: list[tuple[str, str]]) -> None:
    """The result table: one row a step or measure."""
    width = max(len(k) for k, _ in rows)
    print(f"\n| {'step'.ljust(width)} | result |\n|{'-' * (width + 2)}|---|")
    for k, v in rows:
        print(f"| {k.ljust(width)} | {v} |")


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    # A command started in the background (`... &`, nohup) inherits SIGINT ignored, and so would
    # the tests, where one checks what Ctrl-C does: give them the usual disposition back.
    signal.signal(signal.SIGINT, signal.default_int_handler)
    work = Path(args.work) if args.work else Path(tempfile.mkdtemp(prefix="wheelhouse-bench-"))
    work.mkdir(parents=True, exist_ok=True)
    house, venv, logs = work / "wheelhouse", work / "venv", work / "logs"
    if house.exists() or venv.exists():
        print(f"error: {work} already holds a wheelhouse or venv; give an empty --work", file=sys.stderr)
        return 2
    logs.mkdir(exist_ok=True)
    env = pypi_only_env(work / "pip-cache")
    print(f"work folder {work}; logs in {logs}", flush=True)

    build_s = build(house, args.split_mb, args.python, env, logs)
    if build_s is None:
        return 1
    manifest = json.loads((house / "manifest.json").read_text())
    parts = [part for f in manifest["files"] for part in f.get("parts", [])]
    split = [f for f in manifest["files"] if f.get("parts")]
    on_disk = (
        tree_bytes(house / "wheels") + tree_bytes(house / "parts") if parts else tree_bytes(house / "wheels")
    )
    install_s = install(house, venv, args.python, env, logs)
    if install_s is None:
        return 1
    venv_bytes = tree_bytes(venv)
    rc_tests, tests_s = run_tests(venv, logs)

    print_table(
        [
            (
                "Python, platform",
                f"{manifest['implementation']} {manifest['python']}, {manifest['platform']}",
            ),
            ("wheelhouse size", f"{on_disk / 1e9:.2f} GB ({manifest['total_bytes'] / 1e9:.2f} GB of wheels)"),
            ("wheels", f"{len(manifest['files'])} ({len(split)} split)"),
            (
                "parts",
                f"{len(parts)} of at most {args.split_mb} MB (largest {max((q['size'] for q in parts), default=0) / 1e6:.1f} MB)",
            ),
            ("build (resolve, download, sdists to wheels, split)", f"{build_s / 60:.1f} min"),
            ("install (check, reassemble, pip --no-index)", f"{install_s / 60:.1f} min"),
            ("installed environment", f"{venv_bytes / 1e9:.2f} GB"),
            (
                "fast tests (-m 'not slow and not e2e')",
                f"{pytest_summary(logs / 'tests.log')} (exit {rc_tests}, {tests_s / 60:.1f} min)",
            ),
        ]
    )
    if not args.work and not args.keep:
        shutil.rmtree(work, ignore_errors=True)
    return 0 if rc_tests == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
