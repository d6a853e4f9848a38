"""The command line: options, the input, the requests, the checks on the result, the output
(`python -m recipes.tools.rephrase --help`; docs/rephrase.md)."""

from __future__ import annotations

import argparse
import asyncio
import os
import re
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import pyarrow.parquet as pq

from recipes.files import Refused, check_target
from recipes.tools.data import COLUMNS, ROW_SCHEMA, DataError, read_meta, validate_parquet, write_rows
from recipes.tools.rephrase.cache import CacheWriter, cache_key, load_cache
from recipes.tools.rephrase.check import fill
from recipes.tools.rephrase.client import Client, RunError, redact
from recipes.tools.rephrase.prompt import INSTRUCTION_VERSION
from recipes.tools.rephrase.run import format_summary, run_requests, summarize

_ENV_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]{0,127}")
TOOL = "recipes.tools.rephrase"  # the output's metadata says it made the file


def _positive(kind: type, minimum: float):
    def parse(value: str):
        x = kind(value)
        if x < minimum:
            raise argparse.ArgumentTypeError(f"must be >= {minimum}, got {value}")
        return x

    return parse


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="python -m recipes.tools.rephrase",
        description="Fill the `rephrasings` column of a parquet file with N LLM rephrasings per question "
        "(TA-GRPO), through an OpenAI-compatible endpoint. See docs/rephrase.md.",
        formatter_class=argparse.RawDescriptionHelpFormatter,
        epilog="example:\n  python -m recipes.tools.rephrase --input $RECIPES_CACHE/data/math/train.parquet \\\n"
        "      --output $RECIPES_CACHE/data/math_rephrased/train.parquet --rephrasings 3 \\\n"
        "      --base-url http://127.0.0.1:8000/v1 --model Qwen/Qwen2.5-7B-Instruct",
    )
    p.add_argument("--input", required=True, metavar="IN.parquet", help="rows in the project's schema")
    p.add_argument(
        "--output",
        required=True,
        metavar="OUT.parquet",
        help="written atomically at the end; new, or an output of this tool (else see --force)",
    )
    p.add_argument(
        "--rephrasings",
        "--n",
        dest="n",
        required=True,
        type=_positive(int, 1),
        metavar="N",
        help="rephrasings per question (recipes.ta_grpo.n_rephrasings; --n: its old name)",
    )
    p.add_argument(
        "--base-url", required=True, metavar="URL", help="e.g. http://localhost:8000/v1 (vllm serve)"
    )
    p.add_argument("--model", required=True, metavar="NAME", help="the model name the endpoint serves")
    p.add_argument(
        "--api-key-env",
        default="OPENAI_API_KEY",
        metavar="VAR",
        help="environment variable holding the API key (default %(default)s; unset: the placeholder EMPTY)",
    )
    p.add_argument(
        "--concurrency", type=_positive(int, 1), default=16, metavar="K", help="requests in flight (16)"
    )
    p.add_argument(
        "--max-retries",
        type=_positive(int, 0),
        default=5,
        metavar="R",
        help="retries per request (%(default)s)",
    )
    p.add_argument(
        "--timeout-s",
        type=_positive(float, 0.001),
        default=120.0,
        metavar="S",
        help="per request (%(default)s)",
    )
    p.add_argument(
        "--max-rounds",
        type=_positive(int, 1),
        default=3,
        metavar="R",
        help="rounds per question (%(default)s)",
    )
    p.add_argument(
        "--temperature",
        type=_positive(float, 0.0),
        default=0.8,
        metavar="T",
        help="sampling temperature (%(default)s)",
    )
    p.add_argument(
        "--max-tokens",
        type=_positive(int, 1),
        metavar="T",
        help="longest answer per request, in tokens (default: the endpoint's own limit)",
    )
    p.add_argument(
        "--verify",
        type=_positive(int, 0),
        default=3,
        metavar="K",
        help="keep a rephrasing only when more than half of K solutions of it by the same endpoint are "
        "graded equal to the row's answer (%(default)s; 0: text checks only)",
    )
    p.add_argument(
        "--verify-max-tokens",
        type=_positive(int, 1),
        default=2048,
        metavar="T",
        help="longest solution when verifying, in tokens (%(default)s)",
    )
    p.add_argument("--cache", metavar="PATH", help="JSONL cache (default OUT.parquet.cache.jsonl)")
    p.add_argument(
        "--force",
        action="store_true",
        help="replace an --output or --cache file that this tool did not write (the input itself, "
        "for one); without it such a file is refused",
    )
    p.add_argument(
        "--stall-s",
        type=_positive(float, 0.001),
        metavar="S",
        help="stop when no request has been answered for this long (default 3 x --timeout-s)",
    )
    p.add_argument(
        "--max-filled",
        type=_positive(float, 0.0),
        default=0.5,
        metavar="F",
        help="fail (exit 1, no output) when more than this share of the questions ends without N valid "
        "rephrasings (%(default)s; 1 accepts any)",
    )
    return p


def _schema_notes(path: Path) -> list[str]:
    """What write_rows (ROW_SCHEMA) will not carry over from the input: extra columns and fields."""
    schema = pq.read_schema(path)
    notes = [f"column {c!r}" for c in schema.names if c not in COLUMNS]
    for name in COLUMNS:
        have, want = schema.field(name).type, ROW_SCHEMA.field(name).type
        if hasattr(have, "names") and hasattr(want, "names"):  # structs: extra fields
            notes += [f"field {name}.{f}" for f in have.names if f not in want.names]
    return notes


@dataclass
class _Work:
    """What a run does: the input's rows, each row's cache key, one question per key, the records
    the cache already holds (and, once asked, the new ones) and the questions still to ask."""

    rows: list[dict]
    keys: list[str]
    questions: dict[str, str]
    records: dict[str, dict]
    todo: dict[str, tuple[str, str]]

    @property
    def cached(self) -> int:
        return len(self.questions) - len(self.todo)


def _parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = build_parser()
    args = parser.parse_args(argv)
    if "--n" in (sys.argv[1:] if argv is None else argv):
        print("note: --n is now --rephrasings; the old name goes in the next release", file=sys.stderr)
    if not _ENV_NAME.fullmatch(args.api_key_env):  # never echo it: it may be the key itself
        parser.error(
            "--api-key-env takes the NAME of an environment variable (letters, digits, _), not a key"
        )
    return args


def _not_an_output(path: Path) -> str | None:
    try:
        made_by = read_meta(path).get("tool")
    except Exception:  # noqa: BLE001 - not a parquet file at all
        made_by = None
    return None if made_by == TOOL else "is not an output of this tool"


def _not_a_cache(path: Path) -> str | None:
    with path.open("rb") as f:
        head = f.read(16)
    # every line is json.dumps of a record whose first key is "key" (run._new_record); a file cut
    # short inside its first line still starts so
    return None if not head or head.startswith(b'{"key": ') else "is not a cache of this tool"


def _check_paths(out: Path, cache_path: Path, force: bool) -> None:
    """Refuse (`Refused`) an --output or a cache that this tool did not write, unless `force`;
    with it, a cache that is not ours is removed here, so the run starts a new one."""
    check_target(out, folder=False, foreign=_not_an_output, force=force, replaces=str(out), option="--output")
    check_target(
        cache_path,
        folder=False,
        foreign=_not_a_cache,
        force=force,
        replaces=str(cache_path),
        option="--cache",
    )
    if force and cache_path.exists() and _not_a_cache(cache_path):
        cache_path.unlink()


def _read_input(src: Path) -> tuple[list[dict], list[str]] | None:
    """The input's rows and what the output will not carry over (both warned about); None, after
    the error, when the input is invalid."""
    try:
        validate_parquet(src)
    except DataError as exc:
        print(f"error: invalid input: {exc}", file=sys.stderr)
        return None
    dropped = _schema_notes(src)
    if dropped:
        print(
            f"warning: {src}: the output is written with ROW_SCHEMA; not carried over: {', '.join(dropped)}",
            file=sys.stderr,
        )
    rows = pq.read_table(src).to_pylist()
    if any(r["rephrasings"] for r in rows):
        print(f"warning: {src}: existing rephrasings are replaced", file=sys.stderr)
    return rows, dropped


def _plan(rows: list[dict], args: argparse.Namespace, cache_path: Path) -> _Work:
    """Each row's cache key, and which questions the cache does not hold yet."""
    answers = [r["reward_model"]["ground_truth"] for r in rows]
    keys = [
        cache_key(r["extra_info"]["question"], args.model, args.n, args.verify, a)
        for r, a in zip(rows, answers, strict=True)
    ]
    records = load_cache(cache_path)
    questions = {k: r["extra_info"]["question"] for k, r in zip(keys, rows, strict=True)}
    truth = dict(zip(keys, answers, strict=True))
    todo = {k: (q, truth[k]) for k, q in questions.items() if k not in records}
    return _Work(rows, keys, questions, records, todo)


def _client(args: argparse.Namespace, api_key: str | None) -> Client:
    return Client(
        args.base_url,
        args.model,
        api_key,
        args.temperature,
        args.timeout_s,
        args.max_retries,
        args.concurrency,
        args.max_tokens,
        args.stall_s,
        verify_max_tokens=args.verify_max_tokens,
    )


def _ask(
    client: Client, work: _Work, args: argparse.Namespace, cache_path: Path, api_key: str | None
) -> int | None:
    """Ask for every question of `work.todo`, adding each finished one to the cache and to
    `work.records`; the exit status, after the error, when the run could not finish, else None."""
    print(
        f"{len(work.questions)} questions: {work.cached} in {cache_path}, asking {args.model} at {client.url} "
        f"for {len(work.todo)}",
        file=sys.stderr,
    )
    done: dict[str, dict] = {}
    cache = CacheWriter(cache_path)
    failed = None
    try:
        asyncio.run(run_requests(client, work.todo, args.n, args.max_rounds, cache, done, args.verify))
    except RunError as exc:
        failed, status = str(exc), 1
    except KeyboardInterrupt:
        failed, status = "interrupted", 130
    finally:
        cache.close()
    if failed is not None:
        finished = work.cached + len(done)
        print(
            f"error: {redact(failed, api_key)}\n{finished} of {len(work.questions)} questions are finished "
            f"and kept in {cache_path}; rerun the same command to resume (no output written)",
            file=sys.stderr,
        )
        return status
    work.records.update(done)
    return None


def _too_many_filled(summary: dict, args: argparse.Namespace, this_run: dict, cache_path: Path) -> bool:
    """More than --max-filled of the questions lack N valid rephrasings: the summary and the error."""
    if summary["filled_questions"] <= args.max_filled * summary["questions"]:
        return False
    print(format_summary(summary, args.n, args.max_rounds, this_run))
    print(
        f"error: {summary['filled_questions']} of {summary['questions']} questions have fewer than {args.n} "
        f"valid rephrasings (more than --max-filled {args.max_filled:g}); the endpoint's answers are "
        f"kept in {cache_path}. No output written: rerun with --max-filled 1 to write it from the cache "
        "(no new requests), or try another model.",
        file=sys.stderr,
    )
    return True


def _output(
    work: _Work, args: argparse.Namespace, src: Path, dropped: list[str], summary: dict
) -> tuple[list[dict], dict]:
    """The output's rows (each with exactly N rephrasings) and its metadata."""
    out_rows = []
    for row, key in zip(work.rows, work.keys, strict=True):
        new = dict(row)
        new["rephrasings"] = fill(work.questions[key], work.records[key]["rephrasings"][: args.n], args.n)
        out_rows.append(new)
    meta = {
        "tool": TOOL,
        "model": args.model,
        "n": args.n,
        "instruction_version": INSTRUCTION_VERSION,
        "temperature": args.temperature,
        "max_rounds": args.max_rounds,
        "verify": args.verify,
        "input": str(src),
        "input_meta": read_meta(src),
        "not_carried_over": dropped,
        "counts": {k: v for k, v in summary.items() if k != "filled_rows"},
        "filled_rows": summary["filled_rows"],
    }
    return out_rows, meta


def main(argv: Sequence[str] | None = None) -> int:
    args = _parse_args(argv)
    src, out = Path(args.input), Path(args.output)
    cache_path = Path(args.cache) if args.cache else Path(str(out) + ".cache.jsonl")
    api_key = os.environ.get(args.api_key_env) or None
    try:
        _check_paths(out, cache_path, args.force)
    except Refused as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    read = _read_input(src)
    if read is None:
        return 2
    rows, dropped = read
    if api_key is None:
        print(
            f"note: ${args.api_key_env} is not set; sending requests without a real API key", file=sys.stderr
        )
    work = _plan(rows, args, cache_path)
    client = _client(args, api_key)
    if work.todo:
        status = _ask(client, work, args, cache_path, api_key)
        if status is not None:
            return status

    summary = summarize(rows, work.records, work.keys, args.n)
    this_run = {
        "asked": len(work.todo),
        "cached": work.cached,
        "requests": client.requests,
        "retries": client.retries,
    }
    if _too_many_filled(summary, args, this_run, cache_path):
        return 1
    out_rows, meta = _output(work, args, src, dropped, summary)
    try:
        write_rows(out_rows, out, meta)
    except (DataError, OSError) as exc:
        print(f"error: could not write {out}: {exc}", file=sys.stderr)
        return 1
    print(format_summary(summary, args.n, args.max_rounds, this_run))
    print(f"wrote {out} ({len(out_rows)} rows); cache {cache_path}")
    return 0
