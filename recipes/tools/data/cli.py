"""The command line: `python -m recipes.tools.data {toy_arithmetic,prepare,validate}` (docs/data.md).
Exit status: 0 done (every file valid); 2 bad input (an argument, an --out refused, a file that
breaks the schema); 1 `prepare` could not download or convert."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence

import pyarrow.parquet as pq

from recipes.tools.data import ta_authors
from recipes.tools.data.schema import DataError, validate_parquet
from recipes.tools.data.sources import DATASETS, prepare
from recipes.tools.data.ta_authors import SUBSETS as TA_AUTHORS
from recipes.tools.data.toy import TOY_N_TEST, TOY_N_TRAIN, TOY_SEED, write_toy_arithmetic

DESCRIPTION = """Training and validation data: one row schema for every parquet file, a toy arithmetic generator,
preparation of the real math datasets, and a validator."""
"""The first paragraph of the package's docstring, as `--help` shows it."""


FORCE_HELP = (
    "write train.parquet and test.parquet even into a folder holding what this tool did not make "
    "(replacing those two files there); without it such a folder is refused"
)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m recipes.tools.data",
        description=DESCRIPTION,
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
    toy.add_argument("--force", action="store_true", help=FORCE_HELP)
    prep = sub.add_parser("prepare", help="download a real dataset and write it in our schema")
    prep.add_argument(
        "name", choices=sorted([*DATASETS, *TA_AUTHORS]), help="the dataset to download and convert"
    )
    prep.add_argument("--out", metavar="DIR", help="output directory (default $RECIPES_CACHE/data/NAME)")
    prep.add_argument("--force", action="store_true", help=FORCE_HELP)
    val = sub.add_parser("validate", help="check parquet files against the schema")
    val.add_argument("files", metavar="FILE", nargs="+", help="parquet files to check against the row schema")
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        if args.cmd == "toy_arithmetic":
            paths = write_toy_arithmetic(args.out, args.n_train, args.n_test, args.seed, args.force)
        elif args.cmd == "prepare":
            paths = (ta_authors.prepare if args.name in TA_AUTHORS else prepare)(
                args.name, args.out, args.force
            )
        else:
            for f in args.files:
                print(f"{f}: ok, {validate_parquet(f)} rows")
            return 0
    except (DataError, ValueError, OSError) as exc:  # the input, the arguments, the path (Refused)
        print(f"error: {exc}", file=sys.stderr)
        return 2
    except RuntimeError as exc:  # prepare: the download failed
        print(f"error: {exc}", file=sys.stderr)
        return 1
    for p in paths:
        print(f"wrote {p} ({pq.read_metadata(p).num_rows} rows)")
    return 0
