"""Evaluation benchmarks: their public HF ids, and loaders from the hub or from local JSONL files.

`SPECS` names each benchmark with its size and its hub sources, tried in order (the first that loads
is used and recorded); `DEFAULT_SUITE` is the prompt-augmentation paper's five (1,560 questions).
`load(name, data_dir=None, limit=None)` returns a `Benchmark`, a list of `Question(id, problem,
answer, choices)`: `problem` is the text the prompt template wraps; `answer` the ground truth as the
grader takes it (a string, a number, or a list of accepted answers); a multiple-choice question
(GPQA-Diamond) carries its choice texts and a letter answer and is graded by letter
(eval/grading.py). Question ids and GPQA's choice letters are fixed per question, so every run and
every checkpoint sees the same prompts. A row without a question or an answer raises
`BenchmarkError` naming the file or dataset, the row and the column.

docs/eval.md#benchmarks-and-their-data has the table of benchmarks and sources, the columns read,
the shuffling of choices and the layout of a local folder (`--data-dir DIR`).
"""

from __future__ import annotations

import json
import random
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from eval.grading import LETTERS, choice_letter
from rewards.extract import last_boxed

Kind = Literal["math", "choice"]
QUESTION_COLUMNS = ("problem", "question", "Question")
ANSWER_COLUMNS = ("answer", "final_answer", "solution")
ID_COLUMNS = ("unique_id", "id", "Record ID", "idx")
CHOICE_SEED = 0
CHOICE_INSTRUCTION = "Answer with the letter of the correct choice."
# JSON and Python read `\f`, `\b` and `\t` as control characters, and some published copies lost
# the backslash of `\frac`, `\binom` or `\triangle` that way (3 of the 30 rows of a math-ai/aime25
# export). A form feed or a backspace never belongs in a problem; a tab does (Asymptote code), so
# only a tab that starts a LaTeX command is put back.
_LOST_TAB = re.compile(
    r"\t(?=(?:riangle|imes|heta|extbf|extit|extrm|ext|frac|ilde|binom|an|au|op|o)(?![A-Za-z]))"
)


def repair_escapes(text: str) -> str:
    """`text` with the LaTeX backslashes that JSON escapes turned into control characters put back."""
    return _LOST_TAB.sub(r"\\t", text.replace("\x0c", "\\f").replace("\x08", "\\b"))


class BenchmarkError(ValueError):
    """A benchmark that cannot be loaded, or a row that cannot be used."""


@dataclass(frozen=True)
class Source:
    hf_id: str
    split: str
    config: str | None = None

    def __str__(self) -> str:
        return f"{self.hf_id}{'/' + self.config if self.config else ''} ({self.split})"


@dataclass(frozen=True)
class Spec:
    name: str
    size: int
    sources: tuple[Source, ...]
    kind: Kind = "math"
    aliases: tuple[str, ...] = ()


SPECS: dict[str, Spec] = {
    s.name: s
    for s in (
        Spec("aime24", 30, (Source("HuggingFaceH4/aime_2024", "train"),), aliases=("aime",)),
        Spec("aime25", 30, (Source("math-ai/aime25", "test"), Source("yentinglin/aime_2025", "train"))),
        Spec("amc", 83, (Source("AI-MO/aimo-validation-amc", "train"),)),
        Spec("amc23", 40, (Source("knoveleng/AMC-23", "train"), Source("math-ai/amc23", "test"))),
        Spec("math500", 500, (Source("HuggingFaceH4/MATH-500", "test"),), aliases=("math",)),
        Spec(
            "minerva", 272, (Source("knoveleng/Minerva-Math", "train"), Source("math-ai/minervamath", "test"))
        ),
        Spec(
            "olympiadbench",
            675,
            (Source("knoveleng/OlympiadBench", "train"), Source("math-ai/olympiadbench", "test")),
            aliases=("olympiad_bench",),
        ),
        Spec(
            "gpqa_diamond",
            198,
            (Source("Idavidrein/gpqa", "train", "gpqa_diamond"), Source("math-ai/gpqa", "test")),
            kind="choice",
            aliases=("gpqa",),
        ),
    )
}
DEFAULT_SUITE = ("aime24", "amc", "math500", "minerva", "olympiadbench")


@dataclass(frozen=True)
class Question:
    id: str
    problem: str
    answer: Any
    choices: tuple[str, ...] = ()


@dataclass
class Benchmark:
    name: str
    kind: Kind
    source: str
    questions: list[Question] = field(default_factory=list)


def _first(row: dict, columns: tuple[str, ...]) -> tuple[str | None, Any]:
    for col in columns:
        if col in row and row[col] is not None and row[col] != "" and row[col] != []:
            return col, row[col]
    return None, None


def _missing(where: str, i: int, what: str, columns: tuple[str, ...], row: dict) -> BenchmarkError:
    looked = ", ".join(repr(c) for c in columns)
    return BenchmarkError(
        f"{where} row {i}: no {what} (no non-empty column {looked}); the row has columns {sorted(row)}"
    )


def _question_ids(rows: list[dict]) -> list[str]:
    for col in ID_COLUMNS:
        values = [r.get(col) for r in rows]
        if all(v is not None and v != "" for v in values) and len({str(v) for v in values}) == len(rows):
            return [str(v) for v in values]
    return [str(i) for i in range(len(rows))]


def format_choices(problem: str, choices: tuple[str, ...]) -> str:
    """The problem, its lettered choices (`(A) ...`, one per line) and `CHOICE_INSTRUCTION`."""
    lines = "\n".join(f"({LETTERS[i]}) {c}" for i, c in enumerate(choices))
    return f"{problem.strip()}\n\n{lines}\n\n{CHOICE_INSTRUCTION}"


def _choice_question(where: str, i: int, qid: str, row: dict) -> Question:
    col, problem = _first(row, QUESTION_COLUMNS)
    if col is None:
        raise _missing(where, i, "question", QUESTION_COLUMNS, row)
    problem = repair_escapes(str(problem))
    if "Correct Answer" in row:
        texts = [row.get("Correct Answer")] + [row.get(f"Incorrect Answer {j}") for j in (1, 2, 3)]
        for name, text in zip(
            ("Correct Answer", "Incorrect Answer 1", "Incorrect Answer 2", "Incorrect Answer 3"),
            texts,
            strict=True,
        ):
            if text is None or not str(text).strip():
                raise BenchmarkError(f"{where} row {i}: empty or missing column {name!r}")
        order = list(range(4))
        random.Random(f"{CHOICE_SEED}:{qid}").shuffle(order)
        choices = tuple(str(texts[j]).strip() for j in order)
        return Question(qid, format_choices(str(problem), choices), LETTERS[order.index(0)], choices)
    if "choices" in row:
        choices = tuple(str(c).strip() for c in row["choices"])
        _, raw = _first(row, ANSWER_COLUMNS)
        letter = choice_letter(raw, choices) if raw is not None else None
        if letter is None:
            raise BenchmarkError(
                f"{where} row {i}: column 'answer' must be a letter, an index or a choice's text, got {raw!r}"
            )
        return Question(qid, format_choices(str(problem), choices), letter, choices)
    acol, raw = _first(row, ANSWER_COLUMNS)
    if acol is None:
        raise _missing(where, i, "answer", ANSWER_COLUMNS, row)
    letter = choice_letter(raw)
    if letter is None:
        raise BenchmarkError(f"{where} row {i}: column {acol!r} holds no choice letter: {raw!r}")
    return Question(qid, str(problem), letter)


def _math_question(where: str, i: int, qid: str, row: dict) -> Question:
    col, problem = _first(row, QUESTION_COLUMNS)
    if col is None:
        raise _missing(where, i, "question", QUESTION_COLUMNS, row)
    acol, answer = _first(row, ANSWER_COLUMNS)
    if acol is None:
        raise _missing(where, i, "answer", ANSWER_COLUMNS, row)
    if acol == "solution" and isinstance(answer, str):
        answer = last_boxed(answer) or answer
    return Question(qid, repair_escapes(str(problem)), answer)


def _kind_of(name: str, rows: list[dict]) -> Kind:
    if name in SPECS:
        return SPECS[name].kind
    return "choice" if rows and ("choices" in rows[0] or "Correct Answer" in rows[0]) else "math"


def from_rows(name: str, rows: list[dict], where: str, kind: Kind | None = None) -> Benchmark:
    """A benchmark from source rows (dicts); `where` names the file or dataset in error messages."""
    if not rows:
        raise BenchmarkError(f"{where}: no rows")
    kind = kind or _kind_of(name, rows)
    make = _choice_question if kind == "choice" else _math_question
    ids = _question_ids(rows)
    questions = [make(where, i, qid, row) for i, (qid, row) in enumerate(zip(ids, rows, strict=True))]
    return Benchmark(name, kind, where, questions)


def read_jsonl(path: Path) -> list[dict]:
    """Rows of a JSONL file; a line that is not a JSON object is an error naming the line."""
    rows = []
    with open(path, encoding="utf-8") as f:
        for lineno, line in enumerate(f, 1):
            if not line.strip():
                continue
            try:
                row = json.loads(line)
            except json.JSONDecodeError as e:
                raise BenchmarkError(f"{path}: line {lineno} is not JSON ({e.msg})") from None
            except ValueError as e:  # an integer of more than 4,300 digits (Python's limit)
                raise BenchmarkError(
                    f"{path}: line {lineno} holds a number Python will not read ({str(e).split(':')[0]}); "
                    "write it as a string"
                ) from None
            except RecursionError:
                raise BenchmarkError(f"{path}: line {lineno} is nested too deep to read") from None
            if not isinstance(row, dict):
                raise BenchmarkError(f"{path}: line {lineno} is not a JSON object")
            rows.append(row)
    return rows


def local_file(name: str, data_dir: Path) -> Path:
    names = (name, *(SPECS[name].aliases if name in SPECS else ()))
    for n in names:
        path = Path(data_dir) / f"{n}.jsonl"
        if path.is_file():
            return path
    raise BenchmarkError(
        f"benchmark {name!r}: none of {', '.join(n + '.jsonl' for n in names)} in {data_dir}"
    )


def _load_hub(spec: Spec) -> tuple[list[dict], str]:
    import datasets

    errors = []
    for src in spec.sources:
        try:
            ds = datasets.load_dataset(src.hf_id, src.config, split=src.split)
        except Exception as e:  # offline, gated, renamed: try the next source, report all
            errors.append(f"{src}: {type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}")
            continue
        return [dict(r) for r in ds], str(src)
    raise BenchmarkError(
        f"benchmark {spec.name!r}: no source could be loaded from the HF hub:\n  "
        + "\n  ".join(errors)
        + "\n(or pass --data-dir DIR with a local copy, DIR/<name>.jsonl)"
    )


def load(name: str, data_dir: str | Path | None = None, limit: int | None = None) -> Benchmark:
    """Benchmark `name` from `data_dir` (if given) or from the HF hub; the first `limit` questions."""
    if data_dir is not None:
        path = local_file(name, Path(data_dir))
        bench = from_rows(name, read_jsonl(path), str(path))
    elif name in SPECS:
        rows, where = _load_hub(SPECS[name])
        bench = from_rows(name, rows, where)
    else:
        raise BenchmarkError(f"unknown benchmark {name!r}; known: {', '.join(SPECS)} (or use --data-dir)")
    if limit is not None:
        bench.questions = bench.questions[:limit]
    return bench
