"""The JSONL cache: one line per finished question, so that an interrupted run resumes without
asking again (docs/rephrase.md#what-it-writes)."""

from __future__ import annotations

import hashlib
import json
import os
import sys
from collections.abc import Mapping
from pathlib import Path

from recipes.tools.rephrase.prompt import INSTRUCTION_VERSION, VERIFY_VERSION


def cache_key(question: str, model: str, n: int, verify: int = 0, answer: str = "") -> str:
    """SHA-256 of (question text, model, N, INSTRUCTION_VERSION), plus (K, VERIFY_VERSION, the
    ground truth) when the rephrasings are verified with K samples (`--verify K`)."""
    parts: list = [question, model, n, INSTRUCTION_VERSION]
    if verify:
        parts += [verify, VERIFY_VERSION, answer]
    payload = json.dumps(parts, ensure_ascii=False)
    return hashlib.sha256(payload.encode()).hexdigest()


def load_cache(path: Path) -> dict[str, dict]:
    """key -> record of every readable line of the cache (later lines win); a line cut short by a
    crash is skipped with a warning."""
    records: dict[str, dict] = {}
    if not path.exists():
        return records
    bad = 0
    with path.open("rb") as f:  # bytes: a line cut inside a multi-byte character is one bad line
        for line in f:
            if not line.strip():
                continue
            try:
                rec = json.loads(line.decode("utf-8"))
                key, reph = rec["key"], rec["rephrasings"]
                if not isinstance(key, str) or not isinstance(reph, list):
                    raise TypeError
            except (ValueError, KeyError, TypeError):
                bad += 1
                continue
            records[key] = rec
    if bad:
        print(f"warning: {path}: skipped {bad} unreadable line(s)", file=sys.stderr)
    return records


class CacheWriter:
    """Appends one JSON line per finished question, flushed and fsynced at once."""

    def __init__(self, path: Path):
        path.parent.mkdir(parents=True, exist_ok=True)
        cut_short = False  # a line cut short by a crash must not swallow the next one
        if path.exists() and path.stat().st_size:
            with path.open("rb") as f:
                f.seek(-1, os.SEEK_END)
                cut_short = f.read(1) != b"\n"
        self.file = path.open("a", encoding="utf-8")
        if cut_short:
            self.file.write("\n")

    def append(self, record: Mapping) -> None:
        self.file.write(json.dumps(record, ensure_ascii=False) + "\n")
        self.file.flush()
        os.fsync(self.file.fileno())

    def close(self) -> None:
        self.file.close()
