"""The row schema every parquet file of the project has (`ROW_SCHEMA`), the rows, the validator
and the writer (docs/data.md#row-schema, docs/data.md#what-the-validator-checks)."""

from __future__ import annotations

import json
import os
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

from recipes.files import DATA_META_KEY as _META_KEY
from recipes.files import atomic_write, cache_dir
from recipes.files import read_meta as read_meta  # the data tools export it
from rewards.extract import check_ground_truth

INSTRUCTION = "\nPlease reason step by step, and put your final answer within \\boxed{}."
"""Appended to the question to make the user message (the standard Qwen-math prompt)."""

ABILITY = "math"
SPLITS = ("train", "test")
ROLES = ("system", "user", "assistant")

_MESSAGE = pa.struct([("role", pa.string()), ("content", pa.string())])
ROW_SCHEMA = pa.schema(
    [
        ("data_source", pa.string()),
        ("prompt", pa.list_(_MESSAGE)),
        ("ability", pa.string()),
        ("reward_model", pa.struct([("style", pa.string()), ("ground_truth", pa.string())])),
        (
            "extra_info",
            pa.struct(
                [
                    ("index", pa.int64()),
                    ("split", pa.string()),
                    ("question", pa.string()),
                ]
            ),
        ),
        ("rephrasings", pa.list_(pa.string())),
    ]
)
"""The arrow schema of every file we write: fixed types, so any two of our files concatenate. The
answer is stored once (`reward_model.ground_truth`), the raw question once (`extra_info.question`,
besides the prompt that wraps it)."""

COLUMNS: tuple[str, ...] = tuple(ROW_SCHEMA.names)


class DataError(ValueError):
    """A data file or row breaks the schema. `source` is the file (or "<rows>"), `row` the 0-based row
    index (None for a whole-file problem such as a missing column), `column` the column."""

    def __init__(self, source: str, row: int | None, column: str | None, problem: str):
        self.source, self.row, self.column, self.problem = str(source), row, column, problem
        where = [self.source]
        if row is not None:
            where.append(f"row {row}")
        if column is not None:
            where.append(f"column {column!r}")
        super().__init__(f"{', '.join(where)}: {problem}")

    def __reduce__(self):  # picklable (Ray, multiprocessing) despite the 4-argument constructor
        return type(self), (self.source, self.row, self.column, self.problem)


# ----------------------------------------------------------------------------------------------
# Rows


def make_prompt(question: str, system: str | None = None) -> list[dict[str, str]]:
    """The chat messages for `question`: an optional system message, then the user message."""
    messages = [{"role": "system", "content": system}] if system else []
    return messages + [{"role": "user", "content": question + INSTRUCTION}]


def make_row(
    question: str,
    answer: str,
    *,
    data_source: str,
    split: str,
    index: int,
    system: str | None = None,
    rephrasings: Sequence[str] = (),
) -> dict[str, Any]:
    """One row of the schema above."""
    return {
        "data_source": data_source,
        "prompt": make_prompt(question, system),
        "ability": ABILITY,
        "reward_model": {"style": "rule", "ground_truth": answer},
        "extra_info": {"index": index, "split": split, "question": question},
        "rephrasings": list(rephrasings),
    }


def make_rows(pairs: Iterable[tuple[str, str]], *, data_source: str, split: str) -> list[dict[str, Any]]:
    """Rows for (question, answer) pairs, indexed 0..n-1 in order."""
    return [make_row(q, a, data_source=data_source, split=split, index=i) for i, (q, a) in enumerate(pairs)]


# ----------------------------------------------------------------------------------------------
# Validation


def _type_name(value: Any) -> str:
    return "null" if value is None else type(value).__name__


def _check_str(source: str, row: int, column: str, value: Any, key: str = "") -> None:
    """`value` (column `column`, or its field `key`) must be a non-blank string."""
    label = f"{key}: " if key else ""
    if not isinstance(value, str):
        raise DataError(source, row, column, f"{label}expected a string, got {_type_name(value)}")
    if not value.strip():
        raise DataError(source, row, column, f"{label}is empty")


def _check_prompt(source: str, row: int, prompt: Any) -> None:
    if not isinstance(prompt, list | tuple) or not prompt:
        raise DataError(
            source, row, "prompt", f"expected a non-empty list of chat messages, got {_type_name(prompt)}"
        )
    for k, msg in enumerate(prompt):
        if not isinstance(msg, Mapping):
            raise DataError(
                source,
                row,
                "prompt",
                f"message {k}: expected a {{role, content}} dict, got {_type_name(msg)}",
            )
        role, content = msg.get("role"), msg.get("content")
        if role not in ROLES:
            raise DataError(source, row, "prompt", f"message {k}: role {role!r} is not one of {ROLES}")
        if not isinstance(content, str) or not content.strip():
            raise DataError(source, row, "prompt", f"message {k}: content must be a non-empty string")
    if prompt[-1]["role"] != "user":
        raise DataError(
            source, row, "prompt", f"the last message must be the user's, not {prompt[-1]['role']!r}"
        )


def _validate_columns(columns: Mapping[str, list], n_rows: int, source: str, present: Iterable[str]) -> int:
    """Check every row of a column-oriented table (`columns` holds at least our columns that are
    `present`); raise DataError at the first problem."""
    present = sorted(present)
    missing = [c for c in COLUMNS if c not in present]
    if missing:
        raise DataError(
            source, None, missing[0], f"missing column (all missing: {missing}; present: {present})"
        )
    if n_rows == 0:
        raise DataError(source, None, None, "no rows")
    seen_index: dict[int, int] = {}
    for i in range(n_rows):
        for col in ("data_source", "ability"):
            _check_str(source, i, col, columns[col][i])
        _check_prompt(source, i, columns["prompt"][i])

        rm = columns["reward_model"][i]
        if not isinstance(rm, Mapping):
            raise DataError(source, i, "reward_model", f"expected a dict, got {_type_name(rm)}")
        _check_str(source, i, "reward_model", rm.get("style"), "style")
        _check_str(source, i, "reward_model", rm.get("ground_truth"), "ground_truth")
        try:  # the grader's own check: a row it would score 0 for every response is refused here
            check_ground_truth(rm["ground_truth"])
        except ValueError as exc:
            raise DataError(
                source, i, "reward_model", f"ground_truth: {exc}; the grader would score every response 0"
            ) from None

        ei = columns["extra_info"][i]
        if not isinstance(ei, Mapping):
            raise DataError(source, i, "extra_info", f"expected a dict, got {_type_name(ei)}")
        index = ei.get("index")
        if not isinstance(index, int) or isinstance(index, bool):
            raise DataError(source, i, "extra_info", f"index: expected an int, got {_type_name(index)}")
        if index in seen_index:
            raise DataError(source, i, "extra_info", f"index {index} repeats row {seen_index[index]}")
        seen_index[index] = i
        if ei.get("split") not in SPLITS:
            raise DataError(source, i, "extra_info", f"split {ei.get('split')!r} is not one of {SPLITS}")
        _check_str(source, i, "extra_info", ei.get("question"), "question")

        reph = columns["rephrasings"][i]
        if not isinstance(reph, list | tuple):
            raise DataError(source, i, "rephrasings", f"expected a list of strings, got {_type_name(reph)}")
        for r in reph:
            _check_str(source, i, "rephrasings", r)
    return n_rows


def validate_rows(rows: Sequence[Mapping[str, Any]], source: str = "<rows>") -> int:
    """Validate in-memory rows against the schema; returns the row count, raises DataError."""
    names = set().union(*(r.keys() for r in rows)) if rows else set(COLUMNS)
    columns = {c: [r.get(c) for r in rows] for c in COLUMNS if c in names}
    return _validate_columns(columns, len(rows), source, names)


def validate_parquet(path: str | os.PathLike) -> int:
    """Validate a parquet file against the schema; returns the row count, raises DataError naming
    the file, the row and the column of the first problem."""
    path = Path(path)
    if path.is_symlink() and not path.exists():
        raise DataError(
            str(path), None, None, "a symbolic link that leads nowhere (a loop or a missing target)"
        )
    if not path.exists():
        raise DataError(str(path), None, None, "no such file")
    if path.is_dir():  # pyarrow would read it as a (here empty) dataset
        raise DataError(str(path), None, None, "a folder, not a parquet file")
    try:
        table = pq.read_table(path)
    except (OSError, pa.ArrowException) as exc:
        raise DataError(str(path), None, None, f"cannot read as parquet: {exc}") from exc
    for name in table.column_names:  # before any text becomes Python strings
        row = _oversized_row(table.column(name))
        if row is not None:
            raise DataError(
                str(path), row, name, f"a text longer than {MAX_CELL_BYTES:,} bytes (the limit of one cell)"
            )
    # every column, ours or not: a reader of the file (the rephrase CLI) converts them all
    columns = {name: _column_values(table.column(name), str(path), name) for name in table.column_names}
    columns = {name: values for name, values in columns.items() if name in COLUMNS}
    return _validate_columns(columns, table.num_rows, str(path), table.column_names)


MAX_CELL_BYTES = 1 << 20
"""The longest text one cell may hold (a question, a message, an answer, a rephrasing): 1 MiB, a
thousand times a long competition problem. A 1 GiB cell took 4.4 GB of memory to validate."""


def _oversized_row(column: pa.ChunkedArray) -> int | None:
    """The first row holding a string or binary value longer than MAX_CELL_BYTES, at any depth of
    lists and structs, or None; computed on Arrow's buffers, without Python strings."""
    import numpy as np
    import pyarrow.compute as pc

    stack: list[tuple[pa.Array, np.ndarray | None]] = [(column.combine_chunks(), None)]
    first = None
    while stack:
        array, rows = stack.pop()  # rows: each element's row in the column (None: the same)
        kind = array.type
        if (
            pa.types.is_string(kind)
            or pa.types.is_large_string(kind)
            or pa.types.is_binary(kind)
            or pa.types.is_large_binary(kind)
        ):
            over = np.flatnonzero(pc.fill_null(pc.greater(pc.binary_length(array), MAX_CELL_BYTES), False))
            if len(over):
                row = int(over[0] if rows is None else rows[over[0]])
                first = row if first is None else min(first, row)
        elif pa.types.is_list(kind) or pa.types.is_large_list(kind):
            parents = pc.list_parent_indices(array).to_numpy()
            stack.append((pc.list_flatten(array), parents if rows is None else rows[parents]))
        elif pa.types.is_struct(kind):
            stack.extend((field, rows) for field in array.flatten())
    return first


def _column_values(column: pa.ChunkedArray, source: str, name: str) -> list:
    """The column as Python values; DataError naming the first row whose text is not UTF-8
    (parquet does not enforce it, Python's conversion does)."""
    try:
        return column.to_pylist()
    except UnicodeDecodeError as exc:
        lo, hi = 0, len(column)  # the first bad row is in [lo, hi): bisect on slices
        while hi - lo > 1:
            mid = (lo + hi) // 2
            try:
                column.slice(lo, mid - lo).to_pylist()
                lo = mid
            except UnicodeDecodeError:
                hi = mid
        raise DataError(
            source,
            lo,
            name,
            f"text is not valid UTF-8 ({exc.reason}: byte {exc.object[exc.start : exc.start + 1]!r})",
        ) from None


# ----------------------------------------------------------------------------------------------
# Writing


def default_out_dir(name: str) -> Path:
    """Where `name`'s files go unless told otherwise: `$RECIPES_CACHE/data/<name>/`."""
    return cache_dir() / "data" / name


def write_rows(
    rows: Sequence[Mapping[str, Any]], path: str | os.PathLike, meta: Mapping | None = None
) -> Path:
    """Validate `rows`, then write them with `ROW_SCHEMA` atomically (temporary file, then rename).
    `meta` (JSON-able) is stored in the file's schema metadata as provenance."""
    path = Path(path)
    validate_rows(rows, source=str(path))
    schema = ROW_SCHEMA.with_metadata({_META_KEY: json.dumps(dict(meta or {}), sort_keys=True).encode()})
    table = pa.Table.from_pylist([{c: r[c] for c in COLUMNS} for r in rows], schema=schema)
    return atomic_write(path, lambda tmp: pq.write_table(table, tmp))
