"""Checkpoint retention (`recipes.checkpoints.keep_full`): what each save keeps on disk.

verl saves a whole checkpoint every `trainer.save_freq` steps: the actor's fp32 parameters, its
Adam states (twice the parameters) and the dataloader state, 18.5 GB for a 1.5B model. Kept for
every save (verl's `max_actor_ckpt_to_keep: null`), a 4,000-step run saving every 20 steps writes
3.7 TB; verl's rotation deletes old saves whole, and with them every step you might evaluate.
Resuming needs only the latest whole state; evaluating a step needs only its weights. So, with
`keep_full: K`:

  1. after each save, a background process (`python -m eval.convert`, verl's model merger) turns
     every saved step not yet converted into HuggingFace bf16 weights in `<output_dir>/hf/
     global_step_N` (2 bytes a parameter: 3.1 GB for 1.5B) while training goes on;
  2. a save older than the K newest, once its HF folder is complete (the `.converted.json` stamp
     eval.convert writes last), loses everything but its small JSON records: `actor/` (parameters,
     optimizer states), `data.pt`, a ProRL reference snapshot. The step folder stays with
     `pruned.json` naming the HF folder, so `eval.iterate` still lists the step and finds it
     converted.

A conversion that fails leaves its checkpoints whole, says so in the run's log, and is tried again
at the next save. When training ends, the last conversion is waited for and the last pruning done.
`keep_full: null` keeps every checkpoint whole (verl's behaviour; the CPU platform's default). The
GPU platform keeps 2: the newest, and the one before in case the newest was cut short.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path

from recipes.settings import ConfigError

# ------------------------------------------------------------------------- a run's checkpoints
# <output_dir>/checkpoints/global_step_N/ (verl's), <output_dir>/hf/global_step_N/ (eval.convert)
STEP_RE = re.compile(r"^global_step_([0-9]+)$")  # ASCII digits only: \d also matches "٦"
STAMP = ".converted.json"
TRACKER = "latest_checkpointed_iteration.txt"  # verl writes it after a checkpoint is complete


MAX_STEP = 10**15


class StepFolderError(ValueError):
    """Step folders that cannot be told apart or read; the message is one sentence."""


def step_folder(root: str | os.PathLike, step: int) -> str:
    """The folder verl saves step `step` of a run in, under its checkpoint root."""
    return os.path.join(root, f"global_step_{step}")


def find_steps(root: str | os.PathLike) -> dict[int, Path]:
    """step -> `global_step_N` folder under a checkpoint root, sorted by step. Other names (and
    plain files) are not steps; two folders naming one step (`global_step_5`, `global_step_005`),
    a step link that leads nowhere (a loop, a missing target) and a step number beyond MAX_STEP
    raise StepFolderError."""
    root = Path(root)
    if not root.is_dir():
        raise FileNotFoundError(f"checkpoint root {root} is not a folder")
    found: dict[int, Path] = {}
    for child in sorted(root.iterdir()):
        m = STEP_RE.match(child.name)
        if not m:
            continue
        if child.is_symlink() and not child.exists():
            raise StepFolderError(
                f"{child} is a symbolic link that leads nowhere (a loop or a missing target)"
            )
        if not child.is_dir():
            continue
        step = int(m.group(1))
        if step > MAX_STEP:  # past int64 it breaks the plot and TensorBoard's step
            raise StepFolderError(f"{child}: step {m.group(1)} is beyond any training run (at most 10^15)")
        if step in found:
            raise StepFolderError(
                f"{found[step].name} and {child.name} in {root} both name step {step}: remove or rename one"
            )
        found[step] = child
    return dict(sorted(found.items()))


def latest_step(root: str | os.PathLike) -> int | None:
    """The step verl last finished saving (its tracker file), or None."""
    try:
        return int((Path(root) / TRACKER).read_text().strip())
    except (OSError, ValueError):
        return None


def is_converted(target: str | os.PathLike) -> bool:
    return (Path(target) / STAMP).is_file()


def default_hf_root(checkpoint_root: str | os.PathLike) -> Path:
    """`hf/` beside the checkpoint root (e.g. outputs/<project>/<experiment>/hf)."""
    return Path(checkpoint_root).resolve().parent / "hf"


PRUNED = "pruned.json"
KEY = "recipes.checkpoints.keep_full"
WAIT_S = 3600  # the longest wait for a conversion (a 7B one takes minutes); then it is stopped


def check(cfg) -> None:
    """The setting's type, and no second retention rule beside it. Raises ConfigError."""
    from omegaconf import OmegaConf

    keep = OmegaConf.select(cfg, KEY)
    if keep is None:
        return
    if isinstance(keep, bool) or not isinstance(keep, int) or keep < 1:
        raise ConfigError(
            f"{KEY}={keep}: the number of newest checkpoints kept whole (>= 1), or null for all."
        )
    verl_keep = OmegaConf.select(cfg, "trainer.max_actor_ckpt_to_keep")
    if verl_keep is not None:
        raise ConfigError(
            f"trainer.max_actor_ckpt_to_keep={verl_keep} deletes old checkpoints whole, weights included, "
            f"while {KEY}={keep} keeps their weights: set one of them to null."
        )


def _size(path: Path) -> int:
    if path.is_file():
        return path.stat().st_size
    return sum(f.stat().st_size for f in path.rglob("*") if f.is_file())


class Retention:
    """Converts and prunes a run's checkpoint root after each save (module docstring)."""

    def __init__(self, root: str | Path, keep_full: int, say=print, python: str = sys.executable):
        self.root = Path(root).resolve()
        self.hf_root = default_hf_root(self.root)
        self.keep_full = keep_full
        self.say = say
        self.python = python
        self.proc: subprocess.Popen | None = None
        self.started = 0.0

    def after_save(self) -> None:
        """Called after verl has written a checkpoint (its tracker file included)."""
        self.wait(timeout=WAIT_S)
        self.prune()
        cmd = [self.python, "-m", "eval.convert", str(self.root), "--hf-root", str(self.hf_root)]
        self.started = time.monotonic()
        self.proc = subprocess.Popen(cmd, stdin=subprocess.DEVNULL)  # its lines go to the run log

    def wait(self, timeout: float | None = None) -> None:
        if self.proc is None:
            return
        try:
            rc = self.proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            rc = self.proc.wait()
            self.say(
                f"[checkpoints] conversion still running after {timeout:.0f} s: stopped; "
                "the unconverted checkpoints stay whole"
            )
        if rc:
            self.say(
                f"[checkpoints] converting to HF weights failed (exit {rc}, above): those checkpoints stay "
                "whole and are tried again at the next save (or: python -m eval.convert "
                f"{self.root})"
            )
        else:
            self.say(
                f"[checkpoints] HF weights up to date in {self.hf_root} ({time.monotonic() - self.started:.0f} s)"
            )
        self.proc = None

    def prune(self) -> list[int]:
        """Drop the parameters and optimizer states of every save older than the keep_full newest
        whose HF weights are complete. Returns the steps pruned now."""
        try:
            steps = find_steps(self.root)
        except StepFolderError as e:  # someone else's folder in ours: keep everything, say so
            self.say(f"[checkpoints] not pruning: {e}")
            return []
        whole = {s: f for s, f in steps.items() if (f / "actor").is_dir()}
        newest = sorted(whole)[-self.keep_full :]
        pruned = []
        for step, folder in whole.items():
            hf = self.hf_root / folder.name
            if step in newest or not is_converted(hf):
                continue
            heavy = [p for p in folder.iterdir() if p.suffix != ".json"]  # the JSON records stay
            freed = sum(_size(p) for p in heavy)
            (folder / PRUNED).write_text(
                json.dumps({"hf": str(hf), "freed_bytes": freed, "kept_whole": newest}) + "\n"
            )
            for p in heavy:
                shutil.rmtree(p) if p.is_dir() else p.unlink()
            pruned.append(step)
            self.say(
                f"[checkpoints] step {step}: parameters and optimizer states removed "
                f"({freed / 1e9:.2f} GB); its weights are in {hf}"
            )
        return pruned

    def finish(self) -> None:
        """At the end of training: the last conversion, then the last pruning."""
        if self.proc is None:
            return
        self.wait(timeout=WAIT_S)
        self.prune()
