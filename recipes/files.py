"""Files written whole or not at all: into a temporary file beside the target, flushed to disk,
then renamed over it, so a reader (or the next run after a crash) sees the old file or the new one,
never a part. Every file this project rewrites in place goes through `atomic_write`. And where
the project keeps what it builds and downloads (`cache_dir`). And `check_target`: whether a tool may
write a path without destroying what it did not make."""

from __future__ import annotations

import os
import struct
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


DATA_META_KEY = b"recipes.data"  # parquet schema metadata: JSON provenance of a data file


def read_meta(path: str | os.PathLike) -> dict:
    """The provenance `recipes.tools.data.write_rows` stored in a parquet file ({} for a file it
    did not write). Here, in the ground, because methods read it too (TA-GRPO's variant count)."""
    import json

    import pyarrow.parquet as pq

    raw = (pq.read_schema(path).metadata or {}).get(DATA_META_KEY)
    return json.loads(raw) if raw else {}


CACHE_ENV = "RECIPES_CACHE"
DEFAULT_CACHE = "~/.cache/verl_math_recipes"


def cache_dir() -> Path:
    """Local models, prepared data and vLLM's compile cache: `$RECIPES_CACHE`, default
    ~/.cache/verl_math_recipes (configs/train.yaml says the same for Hydra as `recipes.cache_dir`)."""
    return Path(os.environ.get(CACHE_ENV) or DEFAULT_CACHE).expanduser()


class Refused(ValueError):
    """A tool will not write where that would replace what it did not make: one sentence naming
    the path and what `--force` would replace (the command lines print it and exit 2)."""


def listing(folder: str | os.PathLike, most: int = 3) -> str:
    """`N entries (a, b/, c, ...)`: what a folder holds, for a refusal (folders end with /)."""
    entries = sorted(Path(folder).iterdir())
    names = [p.name + ("/" if p.is_dir() else "") for p in entries[:most]]
    more = ", ..." if len(entries) > most else ""
    return f"{len(entries)} entr{'y' if len(entries) == 1 else 'ies'} ({', '.join(names)}{more})"


def check_target(
    path: str | os.PathLike,
    *,
    folder: bool,
    foreign: Callable[[Path], str | None],
    force: bool,
    replaces: str,
    option: str,
) -> None:
    """Raise `Refused` unless a tool may write `path` (a folder if `folder`, else a file). Nothing
    there, or an empty folder: yes. A folder where a file belongs or the reverse, something other
    than a regular file, a link that leads nowhere, or a path under a file: never, not even with
    `force` (that is a wrong path, not an old result). Otherwise `foreign(path)` says what is
    there that the tool did not make (a phrase after the path: "holds ...", "is ..."; None when
    all of it is the tool's own), refused unless `force`. `replaces` is what `--force` replaces,
    `option` the command line's name for the path. Reads only; call it before writing anything."""
    given, path = Path(path), Path(path)
    # What the writer will reach: links resolved, and `new/..` taken as the folder above, since
    # the writer creates `new` first (`a/new/../b` is a/b); the last name stays a name (a link).
    if path.name in ("", ".", ".."):
        path = Path(os.path.realpath(path))
    else:
        path = Path(os.path.realpath(path.parent)) / path.name
    kind = "folder" if folder else "file"
    above = next((p for p in path.parents if os.path.lexists(p)), None)
    if above is not None and not above.is_dir():
        raise Refused(f"{option} {given}: {above} is a file, not a folder")
    if not os.path.lexists(path):
        return
    if not path.exists():
        raise Refused(f"{option} {given} is a symbolic link that leads nowhere")
    if path.is_dir() != folder:
        raise Refused(f"{option} {given} is a {'folder' if path.is_dir() else 'file'}, not a {kind}")
    if not (folder or path.is_file()):  # a device or a pipe: replacing it is never meant
        raise Refused(f"{option} {given} is not a regular file")
    if folder and not any(path.iterdir()):
        return
    what = foreign(path)
    if what is not None and not force:
        raise Refused(
            f"{option} {given} {what}; choose another {option}, or add --force to replace {replaces}"
        )


def matplotlib_dir() -> None:
    """Point MPLCONFIGDIR at a temporary folder removed at exit, unless it is set or matplotlib was
    imported already (it reads the variable on import): its font cache stays out of ~/.cache."""
    import sys

    if "MPLCONFIGDIR" in os.environ or "matplotlib" in sys.modules:
        return
    import atexit
    import shutil

    root = tempfile.mkdtemp(prefix="recipes-matplotlib-")
    os.environ["MPLCONFIGDIR"] = root
    atexit.register(shutil.rmtree, root, ignore_errors=True)


def png_text(path: str | os.PathLike) -> dict[str, str]:
    """The tEXt chunks before a PNG's image data ({} for a file that is not a PNG): how a tool
    that writes pictures knows one of its own (matplotlib's `metadata=` writes them)."""
    out = {}
    try:
        with open(path, "rb") as f:
            if f.read(8) != b"\x89PNG\r\n\x1a\n":
                return {}
            while len(head := f.read(8)) == 8:
                size, kind = struct.unpack(">I4s", head)
                if kind in (b"IDAT", b"IEND") or size > 1 << 20:
                    break
                body = f.read(size)
                f.seek(4, os.SEEK_CUR)  # the CRC
                if kind == b"tEXt" and b"\0" in body:
                    key, text = body.split(b"\0", 1)
                    out[key.decode("latin-1")] = text.decode("latin-1")
    except OSError:
        return {}
    return out
