"""Whether everything a training run reads is on this node, in one line (train.sbatch and the GPU
smoke run ask it before Ray starts; docs/slurm.md#offline-clusters):

    python -m recipes.offline OVERRIDES...   # the training command's Hydra overrides

`offline: ...`: the model (a folder, or a hub id whose whole snapshot is in the Hugging Face cache)
and the data files are here, so HF_HUB_OFFLINE=1 is safe; `online: ...`: a hub model is missing and
this node reaches the Hub, so the run downloads it; otherwise exit 2, naming what to fetch
beforehand. The checks are recipes/platforms/gpu.py's `inputs`; this entry point composes the
config, which a platform module may not (docs/layout.md)."""

from __future__ import annotations

import sys
from collections.abc import Sequence

from recipes.platforms.gpu import Inputs, inputs
from recipes.settings import ConfigError, select


def run_inputs(overrides: Sequence[str]) -> Inputs:
    """`inputs` for the config `python -m recipes.train OVERRIDES` composes."""
    from recipes.compose import compose

    try:
        cfg = compose(list(overrides))
    except Exception as exc:  # noqa: BLE001 - Hydra's own errors, as one line (recipes.train --check
        # has already named a bad override by the time train.sbatch asks this)
        raise ConfigError(f"cannot compose the config: {' '.join(str(exc).split())[:300]}") from None
    files = []
    for key in ("data.train_files", "data.val_files"):
        value = select(cfg, key)
        files += [value] if isinstance(value, str) else list(value or [])
    return inputs(str(select(cfg, "actor_rollout_ref.model.path")), files)


def main(argv: list[str]) -> int:
    import argparse

    p = argparse.ArgumentParser(
        prog="python -m recipes.offline",
        description="Whether everything the run of `python -m recipes.train OVERRIDES` reads is here (then "
        "`offline: ...`, and HF_HUB_OFFLINE=1 is safe), or what it downloads (`online: ...`), in one line.",
        epilog="exit status: 0 ok; 2 something the run needs is missing and cannot be downloaded from this node "
        "(one line saying which)",
    )
    p.add_argument("overrides", nargs="*", help="the training command's Hydra overrides")
    args = p.parse_args(argv)
    try:
        found = run_inputs(args.overrides)
        if not found.ok:
            raise ConfigError(found.line())
        print(found.line(), flush=True)
    except ConfigError as exc:
        print(f"config error: {exc}", file=sys.stderr, flush=True)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
