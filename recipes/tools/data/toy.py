"""toy_arithmetic: short integer questions, generated and seeded, with three fixed rephrasings each
(docs/data.md#toy_arithmetic)."""

from __future__ import annotations

import os
import random
from pathlib import Path

from recipes.tools.data.output import check_out_dir
from recipes.tools.data.schema import default_out_dir, make_rows, write_rows

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
    force: bool = False,
) -> tuple[Path, Path]:
    """Generate and write toy_arithmetic's train.parquet and test.parquet (byte-identical for the same
    arguments). Returns (train_path, test_path). A folder holding anything but this tool's
    toy_arithmetic files is refused (`recipes.files.Refused`) unless `force` (`check_out_dir`)."""
    out = Path(out_dir) if out_dir is not None else default_out_dir("toy_arithmetic")
    train, test = toy_arithmetic_pairs(n_train, n_test, seed)
    check_out_dir(out, "toy_arithmetic", force)
    params = {"version": TOY_VERSION, "n_train": n_train, "n_test": n_test, "seed": seed}
    paths = []
    for split, pairs in (("test", test), ("train", train)):  # train last: its presence means done
        rows = make_rows(pairs, data_source="toy_arithmetic", split=split)
        for row in rows:
            row["rephrasings"] = toy_rephrasings(row["extra_info"]["question"])
        meta = {"name": "toy_arithmetic", "split": split, "rows": len(rows), "params": params}
        paths.append(write_rows(rows, out / f"{split}.parquet", meta))
    return paths[1], paths[0]
