"""Where `toy_arithmetic` and `prepare` may write: a folder that is new, empty or holds this tool's
files of the same dataset; anything else only with `force` (docs/data.md#commands)."""

from __future__ import annotations

import os
from pathlib import Path

from recipes.files import Refused, check_target, listing
from recipes.tools.data.schema import SPLITS, read_meta


def _dataset_of(path: Path) -> str | None:
    """The dataset a file of this tool holds (the name in its metadata), else None."""
    try:
        return read_meta(path).get("name")
    except Exception:  # noqa: BLE001 - not a parquet file at all: not ours either
        return None


def check_out_dir(out: str | os.PathLike, name: str, force: bool = False) -> None:
    """Raise `recipes.files.Refused` unless dataset `name` may be written to `out`: new or empty,
    or holding train.parquet and/or test.parquet that this tool wrote for `name` (anything else
    beside them stays). `force` writes over anything but a wrong kind of path (a file where the
    folder belongs, a folder where train.parquet or test.parquet belongs). Reads only."""
    out = Path(out)
    files = [out / f"{split}.parquet" for split in SPLITS]

    def foreign(folder: Path) -> str | None:  # called with or without force
        present = [folder / f.name for f in files if os.path.lexists(folder / f.name)]
        for f in present:
            if f.is_dir():  # no --force makes a file out of a folder
                raise Refused(f"--out {out}: {f.name} is a folder, not a file")
        if not present:
            return f"holds {listing(folder)} and no {name} data of this tool"
        for f in present:
            made = _dataset_of(f)
            if made != name:
                return f"holds {f.name}, " + (
                    f"{made} data, not {name}" if made else "not a data file of this tool"
                )
        return None

    replaces = " and ".join(str(f) for f in files)
    check_target(out, folder=True, foreign=foreign, force=force, replaces=replaces, option="--out")
