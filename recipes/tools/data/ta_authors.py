"""The TA-GRPO authors' published data (HF `lhkhiem28/TA-GRPO-datasets`; docs/data.md#the-ta-grpo-authors-sets):
`ta_math_a9u`, their rephrased MATH set (config `MATH-A9-U`), and `ta_math`, their plain MATH set
(config `MATH`, their GRPO baselines' data), mapped to our row schema.

Their files (read by lhkhiem28/TA-GRPO@09719bf `utils.py` and `preprocess.py`) have one row per
(question, variant): `question`, `answer` and, in the rephrased set, `index` (the question) and
`sub_index` (the variant). A row whose question is empty is a `pad` row. Their trainer
(`verl/trainer/ppo/ray_trainer.py`) gives every row of a batch with the same `index` one group id,
reads no `type` and masks no pad: a pad row's prompt is their instruction alone, answered `n` times,
in its question's group. Our TA-GRPO keeps a question and its variants in one row (recipes/methods/
ta_grpo.py), so each `index` becomes one row: the variant with the lowest `sub_index` is the question
(q0), the others its `rephrasings` in `sub_index` order, and a pad its `PAD` slot. Questions with
fewer rows than the most any question has get `PAD` slots up to it (counted), so every row has the
same number of variants; a pad with an `index` of its own (no question) is dropped (counted).

The prompt is theirs: their instruction, a newline, then the question, as the one user message.
"""

from __future__ import annotations

import os
import sys
from collections import Counter
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from recipes.tools.data.output import check_out_dir
from recipes.tools.data.schema import default_out_dir, make_row, write_rows
from recipes.tools.data.sources import Source, _norm_question, _pair, _text

PAD = "<ta-grpo-pad>"
"""The `rephrasings` entry of an empty variant slot: recipes/methods/ta_grpo.py's `PAD`, which
shows that session an empty question. Written twice because tools/ and methods/ do not import each
other (docs/layout.md); tests/test_ta_preset.py holds the two equal."""

HF_ID = "lhkhiem28/TA-GRPO-datasets"
"""Their README's dataset link; `preprocess.py` loads `load_dataset(HF_ID, task)`."""

INSTRUCTION = (
    "You FIRST think about the reasoning process step by step and then provide the user with the "
    "answer. Please enclose your final answer in the box: \\boxed{}. Please stop generating "
    "immediately after outputting the box."
)
"""Their `utils.py` instruction, put before the question: `INSTRUCTION + "\\n" + question`."""


@dataclass(frozen=True)
class Subset:
    """One of their dataset configs, written as our dataset `name`."""

    name: str
    config: str

    def sources(self) -> tuple[Source, Source]:
        # rows are grouped by question (group_questions), not mapped one by one: the mapper is unused
        return tuple(Source(HF_ID, dict, split=s, configs=(self.config,)) for s in ("train", "test"))


SUBSETS = {
    s.name: s
    for s in (
        Subset("ta_math_a9u", "MATH-A9-U"),  # their rephrased MATH set: TA-GRPO's training data
        Subset("ta_math", "MATH"),  # their MATH set: their GRPO baselines' training data
    )
}
"""`python -m recipes.tools.data prepare NAME` for each."""


def authors_prompt(question: str) -> list[dict[str, str]]:
    """Their user message: the instruction, a newline, the question (utils.py `make_map_fn`)."""
    return [{"role": "user", "content": INSTRUCTION + "\n" + question}]


def group_questions(
    raw: Iterable[Mapping[str, Any]], split: str, data_source: str
) -> tuple[list[dict], dict[str, int]]:
    """Our rows (one per question, in the order of each question's first row) from their rows, and
    the counts: `rows` read, `pad_rows`, `pads_alone` (pad rows of an `index` without a question,
    dropped), `unusable` (questions whose answer the grader refuses, dropped), `questions` written,
    `variants_per_question` (1 + rephrasings, pads included), `padded_here` (slots we added to
    questions with fewer rows than that), `answer_differs` (variants whose answer is not q0's)."""
    groups: dict[Any, list[tuple[int, int, str, Any]]] = {}
    keys = ("rows", "pad_rows", "pads_alone", "unusable", "answer_differs", "padded_here")
    counts: Counter[str] = Counter(dict.fromkeys(keys, 0))
    for i, row in enumerate(raw):
        counts["rows"] += 1
        # their make_map_fn: rows without `sub_index` keep the row number as their index
        grouped = "sub_index" in row and row["sub_index"] is not None
        index = row.get("index") if grouped else i
        sub = int(row["sub_index"]) if grouped else -1
        question = _text(row.get("question")) or ""  # their test: len(question) == 0 is a pad
        counts["pad_rows"] += not question
        groups.setdefault(index, []).append((sub, i, question, row.get("answer")))
    made = []
    for index, members in groups.items():
        members.sort(key=lambda m: (m[0], m[1]))
        real = [m for m in members if m[2]]
        if not real:
            counts["pads_alone"] += len(members)
            continue
        q0 = real[0]
        pair = _pair(q0[2], q0[3])
        if pair is None:
            counts["unusable"] += 1
            continue
        question, answer = pair
        variants = [m[2] or PAD for m in members if m is not q0]
        counts["answer_differs"] += sum(
            1 for m in real[1:] if _text(m[3]) is not None and _text(m[3]) != _text(q0[3])
        )
        made.append((index, question, answer, variants))
    width = max((len(v) for *_, v in made), default=0)
    rows = []
    for _index, question, answer, variants in made:
        counts["padded_here"] += width - len(variants)
        variants = variants + [PAD] * (width - len(variants))
        row = make_row(question, answer, data_source=data_source, split=split, index=0, rephrasings=variants)
        row["prompt"] = authors_prompt(question)
        rows.append(row)
    # their index where it is a usable id (an int, once per question); else the row number
    ids = [index for index, *_ in made]
    if not all(isinstance(i, int) and not isinstance(i, bool) for i in ids):
        ids = list(range(len(rows)))
    for row, index in zip(rows, ids, strict=True):
        row["extra_info"]["index"] = int(index)
    counts["questions"] = len(rows)
    counts["variants_per_question"] = width + 1 if rows else 0
    return rows, dict(counts)


def build(
    name: str, train_raw: Iterable[Mapping], test_raw: Iterable[Mapping]
) -> tuple[list[dict], list[dict], dict]:
    """(train rows, test rows, counts) of their subset written as dataset `name` (its data_source;
    theirs say `lighteval/MATH`, which only picked verl's grader). Validation shows only q0, so test
    rows keep no rephrasings. Nothing is dropped for also being a test question (their training set
    is theirs whole); `train_in_test` counts those."""
    train, train_counts = group_questions(train_raw, "train", name)
    test, test_counts = group_questions(test_raw, "test", name)
    for row in test:
        row["rephrasings"] = []
    test_questions = {_norm_question(r["extra_info"]["question"]) for r in test}
    counts = {f"train_{k}": v for k, v in train_counts.items()}
    counts |= {f"test_{k}": test_counts[k] for k in ("rows", "pad_rows", "questions")}
    counts["train_in_test"] = sum(
        _norm_question(r["extra_info"]["question"]) in test_questions for r in train
    )
    return train, test, counts


PRESET_VARIANTS = 8
"""Variants per question (pads included) configs/experiment/ta_grpo_math.yaml assumes: inferred, not
read (their file could not be downloaded here); `prepare` says when the file has another number."""


def prepare(name: str, out_dir: str | os.PathLike | None = None, force: bool = False) -> tuple[Path, Path]:
    """Download their subset `name` (HF `datasets`) and write train.parquet and test.parquet in our
    schema to `out_dir` (default `$RECIPES_CACHE/data/<name>/`); as sources.prepare does."""
    subset = SUBSETS[name]
    out = Path(out_dir) if out_dir is not None else default_out_dir(name)
    check_out_dir(out, name, force)
    raw = []
    for src in subset.sources():
        try:
            raw.append(src.load())
        except Exception as exc:  # network, auth, renamed repo: say which id failed and why
            raise RuntimeError(
                f"{name}: could not load {src.hf_id} config {subset.config} ({src.split}): "
                f"{type(exc).__name__}: {exc}"
            ) from exc
    train, test, counts = build(name, *raw)
    if not train or not test:
        raise ValueError(f"{name}: {HF_ID} config {subset.config} gave no usable rows ({counts})")
    print(f"{name}: " + ", ".join(f"{k}={v}" for k, v in counts.items()), file=sys.stderr)
    variants = counts["train_variants_per_question"]
    if name == "ta_math_a9u" and counts["train_padded_here"]:
        print(
            f"{name}: questions have different numbers of rows; {counts['train_padded_here']} pad slots "
            f"were added to give each {variants} variants (their trainer grouped what it found)",
            file=sys.stderr,
        )
    if name == "ta_math_a9u" and variants != PRESET_VARIANTS:
        print(
            f"{name}: {variants} variants per question, not the {PRESET_VARIANTS} the TA-GRPO presets "
            f"assume: train with recipes.ta_grpo.n_rephrasings={variants - 1} "
            f"actor_rollout_ref.rollout.n={8 * variants}, and data.train_batch_size and "
            f"actor_rollout_ref.actor.ppo_mini_batch_size near {256 / variants:g} and {128 / variants:g} "
            "questions (their 256 and 128 rows; docs/data.md#the-ta-grpo-authors-sets)",
            file=sys.stderr,
        )
    paths = {}
    for split, rows in (("test", test), ("train", train)):  # train last: its presence means done
        meta = {"name": name, "split": split, "rows": len(rows), "hf_id": HF_ID, "config": subset.config}
        meta["counts"] = counts
        if split == "train" and name == "ta_math_a9u":
            meta["variants_per_question"] = variants
        paths[split] = write_rows(rows, out / f"{split}.parquet", meta)
    return paths["train"], paths["test"]
