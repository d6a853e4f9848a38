"""Training and validation data: one row schema for every parquet file, a toy arithmetic generator,
preparation of the real math datasets, and a validator.

Commands (run from the repository root):

    python -m recipes.tools.data toy_arithmetic [--out DIR] [--n-train 2000] [--n-test 200] [--seed 0]
    python -m recipes.tools.data prepare {math_l3to5,math,open_rs,deepscaler} [--out DIR]
    python -m recipes.tools.data validate FILE [FILE ...]

Each writes `train.parquet` and `test.parquet` into DIR, by default
`$RECIPES_CACHE/data/<name>/` (`RECIPES_CACHE` defaults to `~/.cache/verl_math_recipes`).
Files are written to a temporary name and renamed, so an interrupted run leaves no half file.
`prepare` needs huggingface.co (HF `datasets`); `toy_arithmetic` needs nothing. The training entry
point calls `ensure_data(name)` before Ray starts: it generates toy data when missing and, for a real
dataset, fails with the exact `prepare` command to run.

Row schema (every file; `ROW_SCHEMA` is the pyarrow schema all writers use)
---------------------------------------------------------------------------
| column         | type                                    | meaning                                        |
|----------------|-----------------------------------------|------------------------------------------------|
| `data_source`  | str                                     | dataset name; verl's metric key (val-core/...) |
| `prompt`       | list[{role: str, content: str}]         | chat messages, optional system first, last one |
|                |                                         | `user`: question + `INSTRUCTION`               |
| `ability`      | str                                     | always "math"                                  |
| `reward_model` | {style: str, ground_truth: str}         | style "rule"; ground_truth: the answer         |
| `extra_info`   | {index: int, split: str, question: str} | index: row number in the file (unique);        |
|                |                                         | split: "train" / "test"; question: the raw     |
|                |                                         | question, without the instruction              |
| `rephrasings`  | list[str]                               | LLM rephrasings of the question for TA-GRPO;   |
|                |                                         | empty here, filled later (ours)                |

verl's RLHFDataset reads `prompt` (chat template applied by the rollout), `data_source`,
`reward_model.ground_truth` and `extra_info.index`, and passes every other column through to the
batch; its reward functions get `(data_source, solution_str, ground_truth, extra_info)`. Each fact
is stored once: the answer as the ground truth, the raw question in `extra_info` (where the agent
loop and TA-GRPO read it). The validator allows extra keys and columns.

Datasets (`DATASETS`; ids from the dataset cards, see docs/data.md)
-------------------------------------------------------------------
| name             | train (rows)                                                | test (validation)         |
|------------------|-------------------------------------------------------------|---------------------------|
| `toy_arithmetic` | generated, seeded: "What is 7 + 5?", "What is (2 + 3) * 4?"; | generated, disjoint       |
|                  | 3 fixed rephrasings each ("Compute 7 + 5.", ...)            |                           |
| `math_l3to5`     | hkust-nlp/SimpleRL-Zoo-Data simplelr_qwen_level3to5 (8,523) | the folder's test.parquet |
| `math`           | EleutherAI/hendrycks_math, 7 subjects, train (7,500)        | HuggingFaceH4/MATH-500    |
| `open_rs`        | knoveleng/open-rs (7,000)                                   | HuggingFaceH4/MATH-500    |
| `deepscaler`     | agentica-org/DeepScaleR-Preview-Dataset (40,315)            | HuggingFaceH4/MATH-500    |

`prepare` drops rows with an empty question or answer and train rows whose question is also a
test question (whitespace- and case-insensitive), and prints how many.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import re
import sys
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

from recipes.files import atomic_write, cache_dir

INSTRUCTION = "\nPlease reason step by step, and put your final answer within \\boxed{}."
"""Appended to the question to make the user message (the standard Qwen-math prompt)."""

ABILITY = "math"
SPLITS = ("train", "test")
ROLES = ("system", "user", "assistant")
_META_KEY = b"recipes.data"  # parquet schema metadata: JSON provenance of the file

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


def read_meta(path: str | os.PathLike) -> dict:
    """The provenance `write_rows` stored in a file ({} for a file we did not write)."""
    raw = (pq.read_schema(path).metadata or {}).get(_META_KEY)
    return json.loads(raw) if raw else {}


# ----------------------------------------------------------------------------------------------
# toy_arithmetic

TOY_VERSION = 3  # bump when the generator or the schema changes: ensure_data then regenerates old files
TOY_N_TRAIN, TOY_N_TEST, TOY_SEED = 2000, 200, 0  # the defaults of the CLI and ensure_data
TOY_MAX_QUESTIONS = 6000
"""Most questions (train + test) one toy set may ask for: 11,301 distinct questions exist, and
past this many, duplicates make drawing slow and the set mostly 2-step."""


def _toy_question(rng: random.Random) -> tuple[str, int]:
    """One question and its integer answer. Operands are small and no answer is negative."""
    kind = rng.choices(("add", "sub", "mul", "two_step"), weights=(3, 3, 2, 2))[0]
    if kind == "add":
        a, b = rng.randint(0, 30), rng.randint(0, 30)
        return f"{a} + {b}", a + b
    if kind == "sub":
        a = rng.randint(0, 30)
        b = rng.randint(0, a)
        return f"{a} - {b}", a - b
    if kind == "mul":
        a, b = rng.randint(1, 12), rng.randint(1, 12)
        return f"{a} * {b}", a * b
    form = rng.randrange(3)
    if form == 0:
        a, b, c = rng.randint(1, 9), rng.randint(1, 9), rng.randint(2, 5)
        return f"({a} + {b}) * {c}", (a + b) * c
    if form == 1:
        a, b, c = rng.randint(2, 9), rng.randint(2, 9), rng.randint(1, 9)
        return f"{a} * {b} + {c}", a * b + c
    a, b = rng.randint(1, 20), rng.randint(1, 20)
    c = rng.randint(0, a + b)
    return f"{a} + {b} - {c}", a + b - c


def toy_arithmetic_pairs(n_train: int, n_test: int, seed: int = 0) -> tuple[list, list]:
    """(train, test) lists of (question, answer) pairs, all questions distinct. The same seed gives
    the same pairs; the test pairs depend only on (n_test, seed), not on n_train."""
    if n_train < 1 or n_test < 1:
        raise ValueError(f"n_train and n_test must be >= 1, got {n_train}, {n_test}")
    want, seen, pairs = n_train + n_test, set(), []
    if want > TOY_MAX_QUESTIONS:
        raise ValueError(
            f"asked for {want} toy questions; at most {TOY_MAX_QUESTIONS} distinct ones are drawn"
        )
    rng = random.Random(seed)
    for _ in range(50 * want + 1000):
        expr, value = _toy_question(rng)
        if expr not in seen:
            seen.add(expr)
            pairs.append((f"What is {expr}?", str(value)))
            if len(pairs) == want:
                return pairs[n_test:], pairs[:n_test]
    raise ValueError(f"could draw only {len(pairs)} distinct toy questions of {want} asked; ask for fewer")


TOY_REPHRASINGS = ("Compute {expr}.", "Calculate the value of {expr}.", "{expr} equals what number?")
"""Three fixed rephrasings of every toy question "What is {expr}?" (TA-GRPO on the CPU; real
datasets get LLM rephrasings from `python -m recipes.tools.rephrase`)."""


def toy_rephrasings(question: str) -> list[str]:
    expr = question.removeprefix("What is ").removesuffix("?")
    return [r.format(expr=expr) for r in TOY_REPHRASINGS]


def write_toy_arithmetic(
    out_dir: str | os.PathLike | None = None,
    n_train: int = TOY_N_TRAIN,
    n_test: int = TOY_N_TEST,
    seed: int = TOY_SEED,
) -> tuple[Path, Path]:
    """Generate and write toy_arithmetic's train.parquet and test.parquet (byte-identical for the same
    arguments). Returns (train_path, test_path)."""
    out = Path(out_dir) if out_dir is not None else default_out_dir("toy_arithmetic")
    train, test = toy_arithmetic_pairs(n_train, n_test, seed)
    params = {"version": TOY_VERSION, "n_train": n_train, "n_test": n_test, "seed": seed}
    paths = []
    for split, pairs in (("test", test), ("train", train)):  # train last: its presence means done
        rows = make_rows(pairs, data_source="toy_arithmetic", split=split)
        for row in rows:
            row["rephrasings"] = toy_rephrasings(row["extra_info"]["question"])
        meta = {"name": "toy_arithmetic", "split": split, "rows": len(rows), "params": params}
        paths.append(write_rows(rows, out / f"{split}.parquet", meta))
    return paths[1], paths[0]


# ----------------------------------------------------------------------------------------------
# Real datasets: mappers from a source row to (question, answer), or None to drop the row


def _text(value: Any) -> str | None:
    """A usable string from a source cell: stripped str, int-valued numbers as ints, else None."""
    if isinstance(value, bool) or value is None:
        return None
    if isinstance(value, float) and value.is_integer():
        value = int(value)
    if isinstance(value, int | float):
        value = str(value)
    if not isinstance(value, str):
        return None
    return value.strip() or None


_INSTRUCTION_TAIL = re.compile(r"\s*Please reason step by step.*\\boxed\{\{?\}?\}\.?\s*$", re.DOTALL)


def _pair(question: Any, answer: Any) -> tuple[str, str] | None:
    q, a = _text(question), _text(answer)
    if q is not None:  # never keep an instruction a source baked into its question
        q = _INSTRUCTION_TAIL.sub("", q).strip() or None
    return None if q is None or a is None else (q, a)


def map_simplerl_zoo(row: Mapping[str, Any]) -> tuple[str, str] | None:
    """hkust-nlp/SimpleRL-Zoo-Data rows are verl rows whose `prompt` has Qwen's chat template baked
    in; the raw question and answer are in `extra_info` and, in some files, also top-level
    (`question`, `gt_answer`). We take them from wherever they are and never reuse their prompt."""
    extra = row.get("extra_info") or {}
    reward = row.get("reward_model") or {}
    question = row.get("question") or extra.get("question") or row.get("problem")
    answer = next(
        (
            a
            for a in (
                row.get("gt_answer"),
                row.get("answer"),
                extra.get("answer"),
                reward.get("ground_truth"),
            )
            if _text(a)
        ),
        None,
    )
    return _pair(question, answer)


def map_hendrycks_math(row: Mapping[str, Any]) -> tuple[str, str] | None:
    """EleutherAI/hendrycks_math (`problem`, `level`, `type`, `solution`): the answer is the last
    `\\boxed{}` of the solution."""
    from grader.extract import last_boxed  # imported here: `grader` pulls in the grading pool

    return _pair(row.get("problem"), last_boxed(row.get("solution") or ""))


def map_problem_answer(row: Mapping[str, Any]) -> tuple[str, str] | None:
    """Datasets with `problem` and `answer` columns: knoveleng/open-rs, DeepScaleR, MATH-500."""
    return _pair(row.get("problem"), row.get("answer"))


@dataclass(frozen=True)
class Source:
    """Where one split comes from: `hf_id`, load_dataset `configs` (None: the default one),
    `split`, `data_files` (for repos read as plain parquet files) and the row `mapper`."""

    hf_id: str
    mapper: Callable[[Mapping[str, Any]], tuple[str, str] | None]
    split: str = "train"
    configs: tuple[str, ...] | None = None
    data_files: str | None = None

    def load(self) -> list[dict]:
        """Download (HF cache) and return the raw rows."""
        import datasets  # heavy; only `prepare` needs it

        rows: list[dict] = []
        for config in self.configs or (None,):
            if self.data_files is not None:
                ds = datasets.load_dataset(
                    self.hf_id, data_files={self.split: self.data_files}, split=self.split
                )
            else:
                ds = datasets.load_dataset(self.hf_id, config, split=self.split)
            rows.extend(ds.to_list())
        return rows


MATH_SUBJECTS = (
    "algebra",
    "counting_and_probability",
    "geometry",
    "intermediate_algebra",
    "number_theory",
    "prealgebra",
    "precalculus",
)
MATH500 = Source("HuggingFaceH4/MATH-500", map_problem_answer, split="test")
_ZOO = "hkust-nlp/SimpleRL-Zoo-Data"

DATASETS: dict[str, tuple[Source, Source]] = {
    "math_l3to5": (
        Source(_ZOO, map_simplerl_zoo, data_files="simplelr_qwen_level3to5/train.parquet"),
        Source(_ZOO, map_simplerl_zoo, split="test", data_files="simplelr_qwen_level3to5/test.parquet"),
    ),
    "math": (Source("EleutherAI/hendrycks_math", map_hendrycks_math, configs=MATH_SUBJECTS), MATH500),
    "open_rs": (Source("knoveleng/open-rs", map_problem_answer), MATH500),
    "deepscaler": (Source("agentica-org/DeepScaleR-Preview-Dataset", map_problem_answer), MATH500),
}
"""Real datasets: name -> (train source, test source)."""

TEST_DATA_SOURCE = {"math_l3to5": "math_l3to5"}
"""data_source of a dataset's test rows when it ships its own test set; else "math500"."""

ALL_NAMES = ("toy_arithmetic", *DATASETS)


def _norm_question(q: str) -> str:
    return " ".join(q.lower().split())


def build_prepared(
    name: str, train_raw: Iterable[Mapping], test_raw: Iterable[Mapping]
) -> tuple[list[dict], list[dict], dict]:
    """Map raw source rows of dataset `name` to schema rows: drop rows without a question or an
    answer, and train rows whose question is a test question. Returns (train, test, counts)."""
    train_src, test_src = DATASETS[name]
    counts: dict[str, int] = {}
    splits = {}
    for split, src, raw in (("train", train_src, train_raw), ("test", test_src, test_raw)):
        raw = list(raw)
        pairs = [p for p in map(src.mapper, raw) if p is not None]
        counts[f"{split}_source"], counts[f"{split}_unusable"] = len(raw), len(raw) - len(pairs)
        splits[split] = pairs
    test_questions = {_norm_question(q) for q, _ in splits["test"]}
    train_pairs = [p for p in splits["train"] if _norm_question(p[0]) not in test_questions]
    counts["train_in_test"] = len(splits["train"]) - len(train_pairs)
    train = make_rows(train_pairs, data_source=name, split="train")
    test = make_rows(splits["test"], data_source=TEST_DATA_SOURCE.get(name, "math500"), split="test")
    counts["train"], counts["test"] = len(train), len(test)
    return train, test, counts


def prepare(name: str, out_dir: str | os.PathLike | None = None) -> tuple[Path, Path]:
    """Download dataset `name` (HF `datasets`), map it to the schema and write train.parquet and
    test.parquet to `out_dir` (default `$RECIPES_CACHE/data/<name>/`). Returns the two paths."""
    if name not in DATASETS:
        raise ValueError(f"unknown dataset {name!r}; prepare knows {sorted(DATASETS)}")
    out = Path(out_dir) if out_dir is not None else default_out_dir(name)
    raw = []
    for src in DATASETS[name]:
        try:
            raw.append(src.load())
        except Exception as exc:  # network, auth, renamed repo: say which id failed and why
            raise RuntimeError(
                f"{name}: could not load {src.hf_id} ({src.split}): {type(exc).__name__}: {exc}"
            ) from exc
    train, test, counts = build_prepared(name, *raw)
    print(f"{name}: " + ", ".join(f"{k}={v}" for k, v in counts.items()), file=sys.stderr)
    paths = {}
    for split, rows in (("test", test), ("train", train)):  # train last: its presence means done
        src = DATASETS[name][SPLITS.index(split)]
        meta = {"name": name, "split": split, "rows": len(rows), "hf_id": src.hf_id, "counts": counts}
        paths[split] = write_rows(rows, out / f"{split}.parquet", meta)
    return paths["train"], paths["test"]


# ----------------------------------------------------------------------------------------------
# Entry points


def ensure_data(
    name: str, out_dir: str | os.PathLike | None = None, *, validate: bool = True, **kw: Any
) -> tuple[Path, Path]:
    """(train_path, test_path) of dataset `name`, ready for verl. toy_arithmetic is generated when
    missing or made with other settings (`kw`: n_train, n_test, seed); a real dataset that was not
    prepared raises FileNotFoundError with the command to run. `validate` checks both files."""
    if name not in ALL_NAMES:
        raise ValueError(f"unknown dataset {name!r}; known: {list(ALL_NAMES)}")
    out = Path(out_dir) if out_dir is not None else default_out_dir(name)
    train, test = out / "train.parquet", out / "test.parquet"
    if name == "toy_arithmetic":
        params = {
            "version": TOY_VERSION,
            "n_train": TOY_N_TRAIN,
            "n_test": TOY_N_TEST,
            "seed": TOY_SEED,
            **kw,
        }
        fresh = (
            train.exists()
            and test.exists()
            and all(read_meta(p).get("params") == params for p in (train, test))
        )
        if not fresh:
            write_toy_arithmetic(out, **{k: v for k, v in params.items() if k != "version"})
    elif kw:
        raise TypeError(f"ensure_data({name!r}) takes no settings, got {sorted(kw)}")
    else:
        missing = [p for p in (train, test) if not p.exists()]
        if missing:
            cmd = f"python -m recipes.tools.data prepare {name}"
            if out_dir is not None:
                cmd += f" --out {out}"
            raise FileNotFoundError(
                f"{name}: {', '.join(map(str, missing))} not found; prepare it first with: {cmd}"
            )
    if validate:
        for p in (train, test):
            validate_parquet(p)
    return train, test


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m recipes.tools.data",
        description=__doc__.split("\n\n")[0],
        formatter_class=argparse.RawDescriptionHelpFormatter,
        epilog="examples:\n  python -m recipes.tools.data toy_arithmetic\n  python -m recipes.tools.data prepare math_l3to5\n  python -m recipes.tools.data validate $RECIPES_CACHE/data/math/train.parquet\n(docs/data.md)",
    )
    sub = parser.add_subparsers(dest="cmd", required=True)
    toy = sub.add_parser("toy_arithmetic", help="generate the toy arithmetic dataset")
    toy.add_argument(
        "--out", metavar="DIR", help="output directory (default $RECIPES_CACHE/data/toy_arithmetic)"
    )
    toy.add_argument(
        "--n-train", metavar="N", type=int, default=TOY_N_TRAIN, help="train questions (default %(default)s)"
    )
    toy.add_argument(
        "--n-test",
        metavar="N",
        type=int,
        default=TOY_N_TEST,
        help="test questions, none in train (default %(default)s)",
    )
    toy.add_argument(
        "--seed", metavar="S", type=int, default=TOY_SEED, help="random seed (default %(default)s)"
    )
    prep = sub.add_parser("prepare", help="download a real dataset and write it in our schema")
    prep.add_argument("name", choices=sorted(DATASETS), help="the dataset to download and convert")
    prep.add_argument("--out", metavar="DIR", help="output directory (default $RECIPES_CACHE/data/NAME)")
    val = sub.add_parser("validate", help="check parquet files against the schema")
    val.add_argument("files", metavar="FILE", nargs="+", help="parquet files to check against the row schema")
    args = parser.parse_args(argv)

    try:
        if args.cmd == "toy_arithmetic":
            paths = write_toy_arithmetic(args.out, args.n_train, args.n_test, args.seed)
        elif args.cmd == "prepare":
            paths = prepare(args.name, args.out)
        else:
            for f in args.files:
                print(f"{f}: ok, {validate_parquet(f)} rows")
            return 0
    except (DataError, RuntimeError, ValueError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    for p in paths:
        print(f"wrote {p} ({pq.read_metadata(p).num_rows} rows)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
