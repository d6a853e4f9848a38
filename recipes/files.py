"""Files written whole or not at all: into a temporary file beside the target, flushed to disk,
then renamed over it, so a reader (or the next run after a crash) sees the old file or the new one,
never a part. Every file this project rewrites in place goes through `atomic_write`. And where
the project keeps what it builds and downloads (`cache_dir`)."""

from __future__ import annotations

import os
import tempfile
from collections.abc import Callable
from pathlib import Path


def atomic_write(path: str | os.PathLike, write: Callable[[Path], object], suffix: str = ".tmp") -> Path:
    """Create `path` (and its folder) by calling `write(temporary path)` and renaming the result
    over `path`; the temporary file is removed if `write` fails. `suffix` is the temporary file's
    (a writer that picks the format from the name, as matplotlib does, needs the real one)."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=suffix, dir=path.parent)
    os.close(fd)
    try:
        write(Path(tmp))
        with open(tmp, "rb+") as f:
            os.fsync(f.fileno())
        os.chmod(tmp, 0o644)
        os.replace(tmp, path)
    finally:
        Path(tmp).unlink(missing_ok=True)
    return path


def atomic_write_text(path: str | os.PathLike, text: str) -> Path:
    return atomic_write(path, lambda tmp: tmp.write_text(text, encoding="utf-8"))


CACHE_ENV = "RECIPES_CACHE"
DEFAULT_CACHE = "~/.cache/verl_math_recipes"


def cache_dir() -> Path:
    """Local models, prepared data and vLLM's compile cache: `$RECIPES_CACHE`, default
    ~/.cache/verl_math_recipes (configs/train.yaml says the same for Hydra as `recipes.cache_dir`)."""
    return Path(os.environ.get(CACHE_ENV) or DEFAULT_CACHE).expanduser()
