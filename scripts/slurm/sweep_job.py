"""End every process of one Slurm job on this node, and the shared memory only they held.

    python scripts/slurm/sweep_job.py NAME=VALUE [--grace SECONDS] [--since EPOCH]

train.sbatch exports RECIPES_SLURM_JOB=<job id> before it starts anything, so every process of
the job (the `ray start` steps, Ray's daemons and workers, vLLM's engines, the grading pool, the
trainer) carries it in its environment, including those that left Slurm's process tree (Ray's
daemons). This sends SIGTERM to each process that carries NAME=VALUE (never to itself or its
ancestors), SIGKILL after --grace seconds to what is left, then removes the /dev/shm files that
only those processes held, and those made since --since (the job's start) that no process holds:
processes that are killed never unlink their semaphores and shared memory, and after a scancel
Slurm has killed most of them before this runs. Processes of other jobs and users, and a Ray cluster beside the job, are not touched
(`ray stop` would end every Ray process on the machine). Prints one line.
"""

from __future__ import annotations

import argparse
import os
import signal
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from recipes.platforms.cpu_vllm import SHM_DIR, carries, held_open, remove_orphans  # noqa: E402


def _made_since(path: Path, since: float) -> bool:
    try:
        return path.stat().st_ctime >= since
    except OSError:
        return False


def ancestors() -> set[int]:
    """This process and every process above it."""
    out, pid = set(), os.getpid()
    while pid > 1:
        out.add(pid)
        try:
            stat = Path(f"/proc/{pid}/stat").read_text()
        except OSError:
            break
        pid = int(stat.rsplit(")", 1)[1].split()[1])
    return out


def marked(mark: str, spare: set[int]) -> list[int]:
    pids = (int(p.name) for p in Path("/proc").iterdir() if p.name.isdigit())
    return [p for p in pids if p not in spare and carries(p, mark)]


def alive(pid: int) -> bool:
    try:
        return "zombie" not in Path(f"/proc/{pid}/status").read_text().lower()
    except OSError:
        return False


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("mark", help="NAME=VALUE in the environment of the job's processes")
    ap.add_argument("--grace", type=float, default=5.0, help="seconds between SIGTERM and SIGKILL")
    ap.add_argument("--since", type=float, default=None, help="the job's start (seconds since the epoch)")
    args = ap.parse_args()
    if "=" not in args.mark:
        ap.error("the mark is NAME=VALUE")

    spare = ancestors()
    pids = marked(args.mark, spare)
    theirs = {name for name, holders in held_open().items() if holders & set(pids)}
    if args.since is not None:
        theirs |= (
            {p.name for p in SHM_DIR.iterdir() if _made_since(p, args.since)} if SHM_DIR.is_dir() else set()
        )
    for pid in pids:
        try:
            os.kill(pid, signal.SIGTERM)
        except ProcessLookupError:
            pass
    deadline = time.monotonic() + args.grace
    while any(alive(p) for p in pids) and time.monotonic() < deadline:
        time.sleep(0.2)
    killed = 0
    for pid in marked(args.mark, spare):  # what is left, and what started meanwhile
        try:
            os.kill(pid, signal.SIGKILL)
            killed += 1
        except ProcessLookupError:
            pass
    removed = remove_orphans(theirs, wait_s=5.0, own=args.mark)
    node = os.environ.get("SLURMD_NODENAME") or os.uname().nodename
    print(
        f"[sweep_job {node}] {len(pids)} process(es) of {args.mark} ended ({killed} killed), "
        f"{len(removed)} /dev/shm file(s) removed",
        file=sys.stderr,
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
