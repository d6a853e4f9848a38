"""A results folder: the per-sample store that makes an evaluation resumable, the summary, the table.

    OUT/config.json    the settings that decide what a sample is (model, template, decoding, grading,
                       backend); a rerun with different ones stops with an error naming them
    OUT/samples.jsonl  one JSON line per generated sample (below), appended as samples finish
    OUT/summary.json   every number of the evaluation (eval.metrics), written at the end
    OUT/table.md       the same as a markdown table, written at the end (and printed)
    OUT/runs.jsonl     one line per invocation: when, how many samples it generated and skipped

A sample line: benchmark, question_id, repeat (the greedy run, or the sample's index when
sampling), prompt_sha (hash of the prompt's token ids), response, pred (extracted answer), correct,
status (grader status), tokens (generated tokens), finish (stop | length), answer (ground truth).

Ownership. A folder that holds anything else (`owned_only`: a name this tool does not write, or a
`config.json` that is not one of these settings) is refused, never written into: a results folder
is new, empty or one of ours. `config.json` is written with the first samples, so a run that fails
before it generated one leaves nothing that would refuse the corrected command; a `config.json`
beside no sample (left by an older version) is replaced.

Writes. `summary.json`, `table.md` and `config.json` are written to a temporary file in the same
folder, fsync'ed and renamed over the old one: a reader sees the old file or the new one, never a
part. Samples are appended a chunk at a time (one `write` of whole lines, then fsync), so a killed
process loses at most the chunk it was generating; if it dies inside that `write`, the file ends in
a partial line, which the next run cuts off (saying so) before it appends. A finished sample is never
generated again: a rerun skips every (benchmark, question_id, repeat) already in the file, after
checking that its prompt is still the same.
"""

from __future__ import annotations

import hashlib
import json
import os
import sys
import tempfile
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path

from recipes.files import atomic_write_text

CONFIG, SAMPLES, SUMMARY, TABLE, RUNS = (
    "config.json",
    "samples.jsonl",
    "summary.json",
    "table.md",
    "runs.jsonl",
)
Key = tuple[str, str, int]
# what a sample line must hold (module docstring); the summary reads all of them
SAMPLE_FIELDS = (
    "benchmark",
    "question_id",
    "repeat",
    "prompt_sha",
    "pred",
    "correct",
    "status",
    "tokens",
    "finish",
)


class ResultsError(RuntimeError):
    """A results folder that does not match this evaluation, or a damaged sample file."""


def ensure_writable(folder: str | os.PathLike, what: str) -> Path:
    """Create `folder` if needed and check a file can be written there; ResultsError in one
    sentence otherwise (a read-only or someone else's folder, a path through a file)."""
    folder = Path(folder)
    try:
        folder.mkdir(parents=True, exist_ok=True)
        tempfile.TemporaryFile(dir=folder).close()
    except OSError as e:
        raise ResultsError(f"cannot write {what} to {folder}: {e.strerror or e}") from None
    return folder


def atomic_write_json(path: str | os.PathLike, data) -> None:
    atomic_write_text(path, json.dumps(data, indent=1, sort_keys=False) + "\n")


def prompt_sha(ids: Sequence[int]) -> str:
    return hashlib.sha256(",".join(map(str, ids)).encode()).hexdigest()[:16]


def owned_only(folder: str | os.PathLike, ours: Callable[[Path], bool], flag: str, tool: str) -> None:
    """ResultsError in one sentence when `folder` is a file, or a folder holding an entry `ours`
    rejects (what `tool` did not write: writing there could replace it); new and empty ones pass."""
    folder = Path(folder)
    if folder.exists() and not folder.is_dir():
        raise ResultsError(f"{flag} {folder} is a file, not a folder: give a new or empty folder")
    try:
        foreign = sorted(p.name for p in folder.iterdir() if not ours(p)) if folder.is_dir() else []
    except OSError as e:
        raise ResultsError(f"cannot read {flag} {folder}: {e.strerror or e}") from None
    if foreign:
        more = f" and {len(foreign) - 3} more" if len(foreign) > 3 else ""
        raise ResultsError(
            f"{flag} {folder} holds what {tool} did not write ({', '.join(foreign[:3])}{more}): "
            "give a new or empty folder"
        )


def temporary_of(path: Path, names: Iterable[str]) -> bool:
    """Whether `path` is atomic_write's temporary file of one of `names` (left by a kill)."""
    return any(path.name.startswith(f".{n}.") for n in names)


def sample_settings_in(path: Path) -> dict | None:
    """OUT/config.json's settings, or None when the file is not eval.run's (not JSON, no model)."""
    try:
        config = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeError, ValueError):
        return None
    return config if isinstance(config, dict) and {"model", "template", "decoding"} <= set(config) else None


def check_results_folder(out: Path) -> None:
    """`out` is new, empty, or an eval.run results folder (module docstring); ResultsError otherwise."""
    names = (CONFIG, SAMPLES, SUMMARY, TABLE, RUNS)

    def ours(p: Path) -> bool:
        if p.name == CONFIG:
            return sample_settings_in(p) is not None
        return (p.name in names and p.is_file()) or temporary_of(p, names)

    owned_only(out, ours, "--out", "eval.run")


def check_config(out: Path, config: dict, has_samples: bool) -> None:
    """Check `config` equals OUT/config.json when OUT holds samples (write_config writes it)."""
    path = out / CONFIG
    if has_samples:
        old = sample_settings_in(path)
        if old is None:
            raise ResultsError(
                f"{out} holds samples but no {CONFIG} saying what settings made them; choose another --out"
            )
        diff = {
            k: (old.get(k), config.get(k))
            for k in sorted(set(old) | set(config))
            if old.get(k) != config.get(k)
        }
        if diff:
            lines = "\n  ".join(f"{k}: {a!r} there, {b!r} now" for k, (a, b) in diff.items())
            raise ResultsError(
                f"{out} holds samples made with other settings:\n  {lines}\n"
                "Rerun with the same settings to resume, or choose another --out."
            )


def write_config(out: Path, config: dict) -> None:
    """OUT/config.json, written before the first sample (check_config compares it from then on)."""
    path = out / CONFIG
    if sample_settings_in(path) != config:
        atomic_write_json(path, config)


class SampleStore:
    """The samples of one results folder, keyed by (benchmark, question_id, repeat)."""

    def __init__(self, out: Path, config: dict | None = None):
        self.path = Path(out) / SAMPLES
        self.config = config  # written to OUT/config.json before the first sample (write_config)
        self.records: dict[Key, dict] = {}
        self.repaired = 0  # bytes of a partial last line cut off on open
        if self.path.exists():
            self._load()

    def _load(self) -> None:
        data = self.path.read_bytes()
        good_end = 0
        lines = data.split(b"\n")
        for i, raw in enumerate(lines):
            last = i == len(lines) - 1
            if not raw.strip():
                good_end += len(raw) + (0 if last else 1)
                continue
            try:
                rec = json.loads(raw)
                if last:  # a complete record always ends with a newline
                    raise ValueError("no newline")
            except ValueError:
                if last:  # torn tail of a killed append: cut it off
                    self.repaired = len(data) - good_end
                    with open(self.path, "r+b") as f:
                        f.truncate(good_end)
                        os.fsync(f.fileno())
                    print(
                        f"[eval] {self.path}: cut off a partial last line ({self.repaired} bytes) "
                        "left by an interrupted write; that sample will be generated again",
                        file=sys.stderr,
                    )
                    return
                raise ResultsError(f"{self.path}: line {i + 1} is not JSON; the file is damaged") from None
            missing = [f for f in SAMPLE_FIELDS if f not in rec] if isinstance(rec, dict) else SAMPLE_FIELDS
            try:
                key = None if missing else (rec["benchmark"], str(rec["question_id"]), int(rec["repeat"]))
            except (ValueError, TypeError):
                missing = ["repeat"]
            if missing:
                raise ResultsError(
                    f"{self.path}: line {i + 1} is not a sample (missing or bad: {', '.join(missing)}); "
                    "the file is damaged"
                )
            self.records.setdefault(key, rec)
            good_end += len(raw) + 1

    def __contains__(self, key: Key) -> bool:
        return key in self.records

    def get(self, key: Key) -> dict | None:
        return self.records.get(key)

    def append(self, records: Iterable[dict]) -> None:
        records = [r for r in records if (r["benchmark"], r["question_id"], r["repeat"]) not in self.records]
        if not records:
            return
        blob = "".join(json.dumps(r, ensure_ascii=False, default=str) + "\n" for r in records).encode("utf-8")
        self.path.parent.mkdir(parents=True, exist_ok=True)
        if self.config is not None:
            write_config(self.path.parent, self.config)
            self.config = None
        with open(self.path, "ab") as f:
            f.write(blob)
            f.flush()
            os.fsync(f.fileno())
        for r in records:
            self.records[(r["benchmark"], r["question_id"], r["repeat"])] = r


def pct(x: float | None) -> str:
    return "-" if x is None else f"{100 * x:.1f}"


def format_table(summary: dict) -> str:
    """The markdown table of a summary (docs/eval.md shows one)."""
    s = summary["settings"]
    runs = s["runs"]
    ks = s["k"]
    label = f"avg@{runs}" if s["decoding"] == "greedy" else f"mean@{runs}"
    head = ["benchmark", "questions", label, "std", "min", "max", *(f"pass@{k}" for k in ks)]
    head += ["tokens", "truncated", "no answer"]
    lines = ["| " + " | ".join(head) + " |", "|---|" + "---:|" * (len(head) - 1)]

    def row(name: str, count: str, block: dict | None, extra: dict | None) -> str:
        acc = (block or {}).get("accuracy") or {}
        cells = [
            name,
            count,
            pct(acc.get("mean")),
            pct(acc.get("std")),
            pct(acc.get("min")),
            pct(acc.get("max")),
        ]
        cells += [pct(((block or {}).get("pass_at_k") or {}).get(str(k))) for k in ks]
        if extra is None:
            cells += ["", "", ""]
        else:
            cells += [f"{extra['mean_tokens']:.0f}", pct(extra["truncated"]), pct(extra["no_answer"])]
        return "| " + " | ".join(cells) + " |"

    for name, b in summary["benchmarks"].items():
        done = "" if b["complete"] else f" ({b['samples_done']}/{b['samples_expected']} samples)"
        lines.append(
            row(
                name + done,
                str(b["questions"]),
                b if b["complete"] else None,
                b if b["samples_done"] else None,
            )
        )
    avg_b, avg_q = summary.get("per_benchmark_average"), summary.get("per_question_average")
    lines.append(row("per-benchmark average", f"{len(summary['benchmarks'])} benchmarks", avg_b, None))
    total = sum(b["questions"] for b in summary["benchmarks"].values())
    lines.append(row("per-question average", str(total), avg_q, None))
    title = (
        f"{s['decoding']}"
        + (f" (temperature {s['temperature']}, top-p {s['top_p']})" if s["decoding"] == "sample" else "")
        + f", {runs} {'repeats' if s['decoding'] == 'greedy' else 'samples'} per question, template {s['template']},"
        f" max {s['max_new_tokens']} new tokens, model length {s['max_model_len']}, grading {s['grading']},"
        f" backend {s['backend']}. In %, except questions and tokens (mean response length); std, min, max"
        f" over the {runs} runs."
    )
    status = (
        ""
        if summary["complete"]
        else "\n\nINCOMPLETE: rerun the same command to finish (finished samples are kept)."
    )
    return f"{summary['model']}\n{title}\n\n" + "\n".join(lines) + status + "\n"
