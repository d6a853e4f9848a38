"""Training and validation data: one row schema for every parquet file, a toy arithmetic generator,
preparation of the real math datasets, and a validator.

Commands (run from the repository root):

    python -m recipes.tools.data toy_arithmetic [--out DIR] [--n-train 2000] [--n-test 200] [--seed 0] [--force]
    python -m recipes.tools.data prepare {math_l3to5,math,open_rs,deepscaler,ta_math_a9u,ta_math} [--out DIR] [--force]
    python -m recipes.tools.data validate FILE [FILE ...]

Contract: every file is written with `ROW_SCHEMA` by `write_rows`, which validates the rows first
and writes atomically (temporary name, then rename), into DIR, by default
`$RECIPES_CACHE/data/<name>/`. DIR must be new, empty or hold this tool's files of the same
dataset; any other is refused (`recipes.files.Refused`; the command: one line, exit 2) unless
--force, before anything is written or downloaded. `validate_parquet` raises `DataError` naming
the file, row and column of the first problem (the command: exit 2). `ensure_data(name)`, which the training entry point calls before Ray
starts, returns a dataset's (train, test) paths: it generates toy_arithmetic when missing or
stale and never downloads (a real dataset not yet prepared raises with the `prepare` command).
docs/data.md has the schema, the checks and the datasets.

Modules: `schema` (the row schema, the validator, the writer), `toy` (toy_arithmetic), `sources`
(the real datasets, `prepare`), `ta_authors` (the TA-GRPO authors' sets, one row per question),
`output` (which folders they may write), `cli`.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from recipes.tools.data.cli import main
from recipes.tools.data.schema import (
    ABILITY,
    COLUMNS,
    INSTRUCTION,
    MAX_CELL_BYTES,
    ROLES,
    ROW_SCHEMA,
    SPLITS,
    DataError,
    default_out_dir,
    make_prompt,
    make_row,
    make_rows,
    read_meta,
    validate_parquet,
    validate_rows,
    write_rows,
)
from recipes.tools.data.sources import (
    DATASETS,
    MATH500,
    MATH_SUBJECTS,
    TEST_DATA_SOURCE,
    Source,
    build_prepared,
    map_hendrycks_math,
    map_problem_answer,
    map_simplerl_zoo,
    prepare,
)
from recipes.tools.data.toy import (
    TOY_MAX_QUESTIONS,
    TOY_N_TEST,
    TOY_N_TRAIN,
    TOY_REPHRASINGS,
    TOY_SEED,
    TOY_VERSION,
    toy_arithmetic_pairs,
    toy_rephrasings,
    write_toy_arithmetic,
)

ALL_NAMES = ("toy_arithmetic", *DATASETS)


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


__all__ = [
    "ABILITY",
    "ALL_NAMES",
    "COLUMNS",
    "DATASETS",
    "INSTRUCTION",
    "MATH500",
    "MATH_SUBJECTS",
    "MAX_CELL_BYTES",
    "ROLES",
    "ROW_SCHEMA",
    "SPLITS",
    "TEST_DATA_SOURCE",
    "TOY_MAX_QUESTIONS",
    "TOY_N_TEST",
    "TOY_N_TRAIN",
    "TOY_REPHRASINGS",
    "TOY_SEED",
    "TOY_VERSION",
    "DataError",
    "Source",
    "build_prepared",
    "default_out_dir",
    "ensure_data",
    "main",
    "make_prompt",
    "make_row",
    "make_rows",
    "map_hendrycks_math",
    "map_problem_answer",
    "map_simplerl_zoo",
    "prepare",
    "read_meta",
    "toy_arithmetic_pairs",
    "toy_rephrasings",
    "validate_parquet",
    "validate_rows",
    "write_rows",
    "write_toy_arithmetic",
]
