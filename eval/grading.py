"""Grading of evaluation responses: math answers with the project's grader, choices by letter.

Math (every benchmark but GPQA): `rewards.grade.Grader.grade_batch` in mode `boxed` by default
(only the last `\\boxed{}` counts, as the papers' evaluation did) or `lenient` (then "the answer
is ...", then the last number); equivalence by math-verify in killable worker processes.

Multiple choice (GPQA-Diamond): the response is cut at the first stop string, its answer is the
last `\\boxed{}` (mode `lenient` also takes the last "answer is (X)" or "(X)" when nothing is
boxed); `\\text{}`-like wrappers and `$` are removed; an answer equal to one choice's text (case and
spacing aside) gives that choice's letter, else `C`, `(C)`, `(C) text`, `C)`, `C.` or `C: text`
give the letter C. Correct when the letter is the answer's letter. No math-verify involved.

Every result is a dict with `acc` (0.0/1.0), `pred` (the extracted answer, "" if none) and `status`
(the grader's statuses: ok | no_answer | box_too_long | timeout | error | bad_ground_truth | too_deep).
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Any

from rewards.extract import Mode, boxed_answer, cut_at_stop, last_boxed, to_text

LETTERS = "ABCDEFGHIJKLMNOPQRSTUVWXYZ"
_WRAPPER_RE = re.compile(r"\\(?:text|textbf|mathrm|mathbf|textrm)\s*\{([^{}]*)\}")
_LETTER_RE = re.compile(r"^(?:\(([A-Z])\)|([A-Z])(?:[.:)]|$))")
_PHRASE_RE = re.compile(r"(?:answer|choice) is\s*:?\s*\$?\(?\s*([A-Z])\b", re.IGNORECASE)
_PAREN_RE = re.compile(r"\(([A-Z])\)")


def _squash(text: str) -> str:
    return " ".join(text.split()).lower()


def choice_letter(answer: Any, choices: Sequence[str] = (), n_letters: int = 4) -> str | None:
    """The letter an answer names: `C`, `(C)`, `C)`, `C. 42`, `\\boxed{C}`, `\\text{(C)}`, or a
    choice's text, or (an int) a 0-based index into `choices`; None if it names none of the first
    max(len(choices), n_letters) letters."""
    if isinstance(answer, int) and not isinstance(answer, bool):
        return LETTERS[answer] if 0 <= answer < len(choices) else None
    text = to_text(answer).strip()
    text = last_boxed(text) or text
    for _ in range(3):  # nested wrappers: \boxed{\text{\textbf{C}}}
        text = _WRAPPER_RE.sub(r"\1", text)
    text = text.strip().strip("$").strip()
    squashed = _squash(text)
    for i, choice in enumerate(choices):  # first: a choice's text may itself start with "A "
        if squashed and squashed == _squash(choice):
            return LETTERS[i]
    m = _LETTER_RE.match(text)
    letter = m and (m.group(1) or m.group(2))
    return letter if letter and letter in LETTERS[: max(len(choices), n_letters)] else None


def extract_choice(response: Any, mode: Mode = "boxed") -> str | None:
    """The raw answer text of a multiple-choice response (module docstring), or None."""
    text = cut_at_stop(to_text(response))
    boxed, too_long = boxed_answer(text)
    if boxed is not None or too_long or mode == "boxed":  # a box too long to read: no answer, not its tail
        return boxed
    phrases = _PHRASE_RE.findall(text)
    if phrases:
        return phrases[-1].upper()
    parens = _PAREN_RE.findall(text)
    return parens[-1] if parens else None


def grade_choice(response: Any, letter: str, choices: Sequence[str] = (), mode: Mode = "boxed") -> dict:
    """Letter grading of one multiple-choice response against the answer `letter`."""
    raw = extract_choice(response, mode)
    if raw is None:
        return {"acc": 0.0, "pred": "", "status": "no_answer"}
    pred = choice_letter(raw, choices)
    if pred is None:
        return {"acc": 0.0, "pred": raw.strip(), "status": "ok"}
    return {"acc": float(pred == letter), "pred": pred, "status": "ok"}


def grade_responses(
    kind: str, responses: Sequence[str], questions: Sequence, mode: Mode, grader
) -> list[dict]:
    """Grade `responses[i]` against `questions[i]` (eval.benchmarks.Question) of a benchmark of
    `kind` ("math" or "choice"); `grader` is a rewards.grade.Grader (used for math only)."""
    if len(responses) != len(questions):
        raise ValueError(f"{len(responses)} responses for {len(questions)} questions")
    if kind == "choice":
        return [grade_choice(r, q.answer, q.choices, mode) for r, q in zip(responses, questions, strict=True)]
    results = grader.grade_batch(list(responses), [q.answer for q in questions], mode=mode)
    return [{"acc": r["acc"], "pred": r["pred"], "status": r["status"]} for r in results]
