"""The real datasets: where each split comes from on the Hugging Face hub, how a source row maps to
(question, answer), and `prepare`, which downloads one and writes it in the row schema
(docs/data.md#datasets)."""

from __future__ import annotations

import os
import re
import sys
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from recipes.tools.data.output import check_out_dir
from recipes.tools.data.schema import SPLITS, default_out_dir, make_rows, write_rows

# ----------------------------------------------------------------------------------------------
# Mappers from a source row to (question, answer), or None to drop the row


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
    if a is not None:  # an answer the grader refuses (`nan`, `$$`) could never be scored: drop the row
        from rewards.extract import check_ground_truth

        try:
            check_ground_truth(a)
        except ValueError:
            a = None
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


_BOX_OPEN = re.compile(r"\\(?:boxed|fbox)\s*\{")
_BETWEEN_BOXES = re.compile(r"[\s$.,;]*(?:(?:and|or)[\s$,;]*)?")
_ASKS_FOR_ALL = re.compile(r"\ball\b", re.IGNORECASE)


def _closed_boxes(text: str) -> list[tuple[int, int, str]]:
    """(start, end, content) of each `\\boxed{...}` / `\\fbox{...}` in `text` whose braces close."""
    boxes = []
    for m in _BOX_OPEN.finditer(text):
        depth = 0
        for j in range(m.end() - 1, len(text)):
            if text[j] in "{}" and text[j - 1] != "\\":
                depth += 1 if text[j] == "{" else -1
                if depth == 0:
                    boxes.append((m.start(), j + 1, text[m.end() : j].strip()))
                    break
    return boxes


def map_hendrycks_math(row: Mapping[str, Any]) -> tuple[str, str] | None:
    """EleutherAI/hendrycks_math (`problem`, `level`, `type`, `solution`): the answer is the last
    `\\boxed{}` of the solution. A question asking for all of several answers whose solution ends
    with one box per answer, joined only by punctuation and "and"/"or" (`$\\boxed{(-2,18)}$ and
    $\\boxed{(8,38)}$`), gets them all, joined by ", " (5 of the 7,500 train rows)."""
    from rewards.extract import last_boxed

    problem, solution = row.get("problem"), row.get("solution") or ""
    answer = last_boxed(solution)
    boxes = _closed_boxes(solution)
    if answer and boxes and boxes[-1][2] == answer and _ASKS_FOR_ALL.search(str(problem or "")):
        run = boxes[-1:]
        for box in reversed(boxes[:-1]):
            if box[1] > run[0][0] or not _BETWEEN_BOXES.fullmatch(solution[box[1] : run[0][0]]):
                break
            run.insert(0, box)
        answer = ", ".join(content for _, _, content in run if content)
    return _pair(problem, answer)


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


def prepare(name: str, out_dir: str | os.PathLike | None = None, force: bool = False) -> tuple[Path, Path]:
    """Download dataset `name` (HF `datasets`), map it to the schema and write train.parquet and
    test.parquet to `out_dir` (default `$RECIPES_CACHE/data/<name>/`). Returns the two paths. A
    folder holding anything but this tool's files of `name` is refused (`recipes.files.Refused`)
    before the download, unless `force` (`check_out_dir`). The TA-GRPO authors' sets are grouped by
    question instead: recipes/tools/data/ta_authors.py (the command line picks the one to call)."""
    if name not in DATASETS:
        raise ValueError(f"unknown dataset {name!r}; prepare knows {sorted(DATASETS)}")
    out = Path(out_dir) if out_dir is not None else default_out_dir(name)
    check_out_dir(out, name, force)
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
