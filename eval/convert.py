"""Convert verl FSDP checkpoints to HuggingFace model folders with verl's own model merger.

    python -m eval.convert CHECKPOINT_ROOT                     # every global_step_N -> ../hf/global_step_N
    python -m eval.convert CHECKPOINT_ROOT --every 100 --hf-root /scratch/me/run1_hf
    python -m eval.convert CHECKPOINT_ROOT --steps 2720

CHECKPOINT_ROOT is a training run's `checkpoints/` folder (`recipes.output_dir/checkpoints`),
holding `global_step_N/actor/` folders; each is merged, in bf16, into `HF_ROOT/global_step_N/`
(default: `hf/` beside CHECKPOINT_ROOT, never inside a checkpoint). A conversion is atomic (a
temporary sibling folder, the stamp `.converted.json` written last, then a rename): a folder
without the stamp is never taken for a model, and a converted step is skipped on the next run. An
incomplete or unreadable checkpoint, a shard that is not a state dict of tensors, merged weights
whose shapes are not the ones the model's config asks for (eval/weights.py), or a converted
folder whose weights were damaged since, raises `IncompleteCheckpoint` naming the file and why;
the command skips that step and converts the other steps. Every shard is loaded tensors-only
(`tensors_only`): a planted pickle is refused and never runs. HF_ROOT holds only what eval.convert
writes (stamped `global_step_N` folders, its temporary folders): one that holds anything else is
refused before anything is written, so nothing of someone else's is replaced. CPU only.
Exit status: 0 done; 1 some checkpoints incomplete (skipped); 2 bad arguments or folders.
docs/eval.md says where things go and what is refused.
"""

from __future__ import annotations

import argparse
import contextlib
import functools
import json
import os
import pickle
import re
import shutil
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path

from eval.backends import progress_bars
from eval.results import ResultsError, ensure_writable, owned_only
from eval.weights import BadWeights, check_weights
from recipes.checkpoints import STAMP, STEP_RE, default_hf_root, find_steps, is_converted

TMP_RE = re.compile(r"^\.global_step_[0-9]+\.tmp-")  # convert's temporary folders (tempfile.mkdtemp)


class IncompleteCheckpoint(RuntimeError):
    """A step that cannot be converted: a checkpoint folder missing files the merger needs, or with
    unreadable or malformed ones, or a converted folder damaged since. The step is skipped by name."""


class UnsafeCheckpoint(IncompleteCheckpoint):
    """A shard that is not plain tensors: unpickling it could run code, so it is not loaded."""


@contextlib.contextmanager
def tensors_only():
    """verl's merger loads shards with `torch.load(..., weights_only=False)`, which runs whatever
    code a pickle names. Inside this block every `torch.load` is `weights_only=True`: tensors,
    DTensors and plain containers load; anything else is refused, naming the file, and not run."""
    import torch
    import torch.distributed.tensor  # noqa: F401 - registers DTensor with the weights-only loader

    real = torch.load

    def load(f, *args, **kwargs):
        kwargs["weights_only"] = True
        try:
            shard = real(f, *args, **kwargs)
        except pickle.UnpicklingError as e:
            text = " ".join(str(e).split())
            at = text.find("GLOBAL")  # a name the weights-only loader refused to import or call
            if at < 0:  # a cut-short or foreign file (refused all the same), reported as unreadable
                raise
            raise UnsafeCheckpoint(
                f"{f}: refused, it is not plain tensors and loading it could run code ({text[at:][:160]})"
            ) from None
        # the merger indexes a shard as {parameter name: tensor}; anything else fails deep inside it
        if not isinstance(shard, dict) or not shard:
            what = "an empty dict" if isinstance(shard, dict) else f"a {type(shard).__name__}"
            raise IncompleteCheckpoint(f"{f}: not a shard of parameters (a dict of tensors): it holds {what}")
        bad = next((k for k, v in shard.items() if not isinstance(k, str) or not torch.is_tensor(v)), None)
        if bad is not None:
            raise IncompleteCheckpoint(
                f"{f}: not a shard of parameters: entry {str(bad)[:80]!r} is a {type(shard[bad]).__name__}"
            )
        return shard

    torch.load = load
    try:
        yield
    finally:
        torch.load = real


def select_steps(
    steps: Sequence[int], every: int | None = None, only: Sequence[int] | None = None
) -> list[int]:
    """All `steps`, or those divisible by `every`, or those listed in `only` (which must exist)."""
    if every is not None and only:
        raise ValueError("give either --every or --steps, not both")
    if only:
        missing = sorted(set(only) - set(steps))
        if missing:
            raise ValueError(f"no global_step_N folder for step(s) {missing}; found {list(steps)}")
        return sorted(set(only))
    if every is not None:
        if every < 1:
            raise ValueError(f"--every must be >= 1, got {every}")
        return [s for s in steps if s % every == 0]
    return list(steps)


def check_checkpoint(step_dir: str | os.PathLike) -> Path:
    """The `actor` folder of a complete checkpoint; raises IncompleteCheckpoint otherwise."""
    step_dir = Path(step_dir)
    actor = step_dir / "actor"
    config = actor / "fsdp_config.json"
    if not actor.is_dir():
        raise IncompleteCheckpoint(f"{step_dir}: no actor/ folder")
    try:
        world_size = json.loads(config.read_text())["world_size"]
        if not isinstance(world_size, int) or world_size < 1:
            raise ValueError(world_size)
    except FileNotFoundError:
        raise IncompleteCheckpoint(f"{step_dir}: missing actor/fsdp_config.json") from None
    except (ValueError, KeyError, TypeError) as e:
        raise IncompleteCheckpoint(f"{config}: no valid world_size ({e!r})") from None
    # bounded by what is on disk: a world size of 10^9 in the file was a silent loop of 10^9 stats
    entries = sum(1 for _ in actor.iterdir())
    if world_size > entries:
        raise IncompleteCheckpoint(
            f"{config}: world_size {world_size} is more than the {entries} files in actor/ (one shard a rank)"
        )
    missing = [
        f"actor/model_world_size_{world_size}_rank_{r}.pt"
        for r in range(world_size)
        if not (actor / f"model_world_size_{world_size}_rank_{r}.pt").is_file()
        or (actor / f"model_world_size_{world_size}_rank_{r}.pt").stat().st_size == 0
    ]
    if not (actor / "huggingface" / "config.json").is_file():
        missing.append("actor/huggingface/config.json")
    if missing:
        raise IncompleteCheckpoint(f"{step_dir}: missing or empty {', '.join(missing)}")
    return actor


def _merge(actor: Path, target: Path, trust_remote_code: bool, progress: bool = True) -> None:
    """verl's FSDP merger, as `python -m verl.model_merger merge --backend fsdp` runs it; without
    `progress`, its "Loading N FSDP shards" bar is not shown (transformers': progress_bars)."""
    from verl.model_merger import fsdp_model_merger
    from verl.model_merger.base_model_merger import ModelMergerConfig
    from verl.model_merger.fsdp_model_merger import FSDPModelMerger

    config = ModelMergerConfig(
        operation="merge",
        backend="fsdp",
        local_dir=str(actor),
        target_dir=str(target),
        hf_model_config_path=str(actor / "huggingface"),
        trust_remote_code=trust_remote_code,
    )
    merger = FSDPModelMerger(config)
    bar = fsdp_model_merger.tqdm
    if not progress:
        fsdp_model_merger.tqdm = functools.partial(bar, disable=True)
    try:  # its progress lines are logs, not our output; its shard loads, tensors only
        with contextlib.redirect_stdout(sys.stderr), tensors_only():
            merger.merge_and_save()
    finally:
        fsdp_model_merger.tqdm = bar
    merger.cleanup()


def convert(
    step_dir: str | os.PathLike,
    target: str | os.PathLike,
    force: bool = False,
    trust_remote_code: bool = False,
    progress: bool = True,
) -> tuple[Path, bool]:
    """Convert one `global_step_N` folder into the HF folder `target`, atomically (module
    docstring). Returns (target, converted now?); a stamped `target` is kept unless `force`."""
    import verl

    step_dir, target = Path(step_dir).resolve(), Path(target).resolve()
    if step_dir in target.parents or target == step_dir:
        raise ValueError(f"HF folder {target} must not be inside the checkpoint {step_dir}")
    if is_converted(target) and not force:  # its shards may be gone (recipes/checkpoints.py)
        try:
            check_weights(target)
        except BadWeights as e:  # damaged since: say so, replace it only when told (--force)
            raise IncompleteCheckpoint(f"{e}; convert the step again with --force") from None
        return target, False
    check_target(target)
    actor = check_checkpoint(step_dir)
    target.parent.mkdir(parents=True, exist_ok=True)
    for stale in target.parent.glob(f".{target.name}.tmp-*"):
        shutil.rmtree(stale, ignore_errors=True)
    t0 = time.perf_counter()
    tmp = Path(tempfile.mkdtemp(prefix=f".{target.name}.tmp-", dir=target.parent))
    try:
        try:
            _merge(actor, tmp, trust_remote_code, progress)
            check_weights(tmp)  # the merger writes whatever shapes the shards hold
        except IncompleteCheckpoint:
            raise
        except BadWeights as e:
            raise IncompleteCheckpoint(
                f"{step_dir}: its weights do not fit its model's config ({str(e).split(': ', 1)[-1]})"
            ) from None
        except Exception as e:  # noqa: BLE001 - malformed files fail anywhere inside the merger
            # a truncated shard or config.json: refuse this step by name, keep the others going
            reason = (str(e).strip().splitlines() or [""])[0][:200]
            raise IncompleteCheckpoint(
                f"{step_dir}: verl's merger cannot read it ({type(e).__name__}: {reason})"
            ) from None
        for f in tmp.rglob("*"):
            f.chmod(0o755 if f.is_dir() else 0o644)  # the merger writes weights owner-only
        tmp.chmod(0o755)
        stamp = {
            "source": str(step_dir),
            "verl": verl.__version__,
            "seconds": round(time.perf_counter() - t0, 2),
        }
        (tmp / STAMP).write_text(json.dumps(stamp, indent=1) + "\n")
        if target.exists():  # an empty folder (check_target), or ours under --force
            old = Path(tempfile.mkdtemp(prefix=f".{target.name}.tmp-old-", dir=target.parent))
            os.rename(target, old / "x")
            os.rename(tmp, target)
            shutil.rmtree(old, ignore_errors=True)
        else:
            os.rename(tmp, target)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return target, True


def ours(entry: Path) -> bool:
    """Whether an entry of an HF root is eval.convert's: a stamped or empty `global_step_N` folder,
    or a temporary folder of a conversion."""
    if TMP_RE.match(entry.name):
        return True
    if not (STEP_RE.match(entry.name) and entry.is_dir()):
        return False
    return is_converted(entry) or not any(entry.iterdir())


def check_target(target: Path) -> None:
    """ValueError in one sentence when `target` is a file, or a folder with content and no stamp:
    someone else's, which a conversion would replace."""
    if target.exists() and not ours(target):
        raise ValueError(
            f"{target} exists and was not written by eval.convert (no {STAMP}): move it away or give "
            "another --hf-root"
        )


def check_hf_root(hf_root: Path) -> None:
    """ResultsError in one sentence unless `hf_root` is new, empty or holds only eval.convert's
    folders (`ours`)."""
    owned_only(hf_root, ours, "--hf-root", "eval.convert")


def int_list(text: str) -> list[int]:
    try:
        return [int(x) for x in text.split(",") if x.strip()]
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected comma-separated integers, got {text!r}") from None


def positive_int(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected an integer, got {text!r}") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be at least 1, got {text}")
    return value


def add_selection_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--every", type=positive_int, help="only steps divisible by K")
    p.add_argument("--steps", type=int_list, help="only these steps, e.g. 20,40,2720")
    p.add_argument("--hf-root", help="where converted models go (default: hf/ beside CHECKPOINT_ROOT)")
    p.add_argument("--trust-remote-code", action="store_true", help="passed to verl's merger")


def outside(folder: Path, root: Path, flag: str) -> Path:
    """`folder`, refused in one sentence when it lies inside the checkpoint root `root` (converted
    models there would be read as checkpoints, and pruning would delete them)."""
    if folder == root or root in folder.parents:
        raise ValueError(f"{flag} {folder} is inside the checkpoint folder {root}: give a folder outside it")
    return folder


def resolve(path: str | os.PathLike) -> Path:
    """`path` made absolute, links followed; a link loop is a ValueError in one sentence."""
    try:
        return Path(path).resolve()
    except RuntimeError:  # Python 3.11 reports a symlink loop so
        raise ValueError(f"{path} is a symbolic link loop") from None


def _locate(path: Path, hf_root: str | None) -> tuple[Path, dict[int, Path], Path]:
    """(checkpoint root, {step: folder}, HF root) for a checkpoint root or one step folder."""
    resolved = resolve(path)
    m = STEP_RE.match(resolved.name)
    if m and resolved.is_dir():
        root, steps = resolved.parent, {int(m.group(1)): resolved}
    else:
        root, steps = resolved, find_steps(resolved)
    hf = Path(hf_root).resolve() if hf_root else default_hf_root(root)
    return root, steps, outside(hf, root, "--hf-root")


def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(
        prog="python -m eval.convert",
        description=__doc__.split("\n\n")[0],
        formatter_class=argparse.RawDescriptionHelpFormatter,
        epilog="examples:\n  python -m eval.convert outputs/verl_math_recipes/my_run/checkpoints\n  python -m eval.convert RUN/checkpoints/global_step_100 --force",
    )
    p.add_argument("checkpoint", help="CHECKPOINT_ROOT (holding global_step_N/), or one global_step_N folder")
    add_selection_arguments(p)
    p.add_argument("--force", action="store_true", help="convert again even if already converted")
    p.add_argument(
        "--no-progress", action="store_true", help="no progress bars (verl's merger, transformers')"
    )
    args = p.parse_args(argv)
    try:
        root, steps, hf_root = _locate(Path(args.checkpoint), args.hf_root)
        chosen = select_steps(list(steps), args.every, args.steps)
        check_hf_root(hf_root)
        ensure_writable(hf_root, "converted models")
    except (OSError, ValueError, ResultsError) as e:  # StepFolderError is a ValueError
        print(f"error: {e}", file=sys.stderr)
        return 2
    failed = 0
    for k, step in enumerate(chosen, 1):
        try:
            with progress_bars(not args.no_progress):
                target, done_now = convert(
                    steps[step],
                    hf_root / f"global_step_{step}",
                    args.force,
                    args.trust_remote_code,
                    progress=not args.no_progress,
                )
        except IncompleteCheckpoint as e:
            print(f"[convert] step {step} ({k}/{len(chosen)}): skipped: {e}", file=sys.stderr)
            failed += 1
            continue
        except ValueError as e:  # someone else's folder where the model would go (check_target)
            print(f"error: {e}", file=sys.stderr)
            return 2
        print(
            f"[convert] step {step} ({k}/{len(chosen)}): {'converted' if done_now else 'already converted'} -> {target}",
            flush=True,
        )
    if not chosen:
        print(f"[convert] no global_step_N checkpoints selected in {root}", file=sys.stderr)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
