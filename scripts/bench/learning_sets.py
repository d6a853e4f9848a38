"""The learning benchmark's held-out sets and its second grading rule (scripts/bench/learning.py).

toy_heldout    the toy arithmetic test split under the training prompt (never trained on)
toy_rephrased  each held-out question in three phrasings that no training set uses, the answer
               kept by construction: does a gain carry over to other phrasings (TA-GRPO's claim)?
toy_ood        three-operation questions with parentheses, harder than any training question:
               does a method learn more than the answer format?
"""

from __future__ import annotations

import contextlib
import io
import json
import random
import re
import sys
from pathlib import Path

BENCH = "toy_heldout"
SETS = (BENCH, "toy_rephrased", "toy_ood")
# none of these is a training rephrasing (TOY_REPHRASINGS in recipes/tools/data/toy.py)
HELDOUT_REPHRASINGS = ("Find the value of {expr}.", "Evaluate {expr}.", "What number does {expr} give?")
OOD_SEED = 1


def write_heldout(cache_overrides: list[str], out: Path, limit: int | None = None) -> int:
    """The test split (its first `limit` rows) as eval.run's local benchmark files, under the
    user turn the trainer shows: toy_heldout, toy_rephrased (3 per row), toy_ood (as many)."""
    import pyarrow.parquet as pq

    captured = io.StringIO()  # verl's import-time warnings (engines it cannot load on a CPU)
    try:
        with contextlib.redirect_stderr(captured):
            from recipes.train import compose, prepare

            cfg = compose(cache_overrides)
            prepare(cfg)  # the model and the data, built once here (not inside a timed launch)
    except BaseException:
        sys.stderr.write(captured.getvalue())
        raise
    rows = pq.read_table(cfg.data.val_files).to_pylist()[:limit]
    out.mkdir(parents=True, exist_ok=True)
    write_jsonl(
        out / f"{BENCH}.jsonl",
        [(r["prompt"][-1]["content"], r["reward_model"]["ground_truth"]) for r in rows],
    )
    write_jsonl(out / "toy_rephrased.jsonl", rephrased(rows))
    instruction = rows[0]["prompt"][-1]["content"].removeprefix(rows[0]["extra_info"]["question"])
    ood = [(f"What is {expr}?{instruction}", str(value)) for expr, value in ood_pairs(len(rows))]
    write_jsonl(out / "toy_ood.jsonl", ood)
    return len(rows)


def write_jsonl(path: Path, items: list[tuple[str, str]]) -> None:
    path.write_text("".join(json.dumps({"problem": p, "answer": a}) + "\n" for p, a in items))


def rephrased(rows: list[dict]) -> list[tuple[str, str]]:
    """(problem, answer) of each held-out row in each of HELDOUT_REPHRASINGS: the question part of
    the training prompt replaced, the instruction and the answer kept."""
    items = []
    for r in rows:
        question, problem = r["extra_info"]["question"], r["prompt"][-1]["content"]
        expr = question.removeprefix("What is ").removesuffix("?")
        for form in HELDOUT_REPHRASINGS:
            items.append(
                (problem.replace(question, form.format(expr=expr), 1), r["reward_model"]["ground_truth"])
            )
    return items


def ood_pairs(n: int, seed: int = OOD_SEED) -> list[tuple[str, int]]:
    """n distinct three-operation expressions with parentheses, operands 2-9, values >= 0."""
    rng, seen, pairs = random.Random(seed), set(), []
    while len(pairs) < n:
        a, b, c, d = (rng.randint(2, 9) for _ in range(4))
        form = rng.randrange(4)
        if form == 0:
            expr, value = f"({a} + {b}) * {c} - {d}", (a + b) * c - d
        elif form == 1:
            expr, value = f"{a} * ({b} + {c}) + {d}", a * (b + c) + d
        elif form == 2:
            expr, value = f"({a} + {b}) * ({c} + {d})", (a + b) * (c + d)
        else:
            expr, value = f"({max(a, b)} - {min(a, b)}) * {c} + {d}", (max(a, b) - min(a, b)) * c + d
        if expr not in seen:
            seen.add(expr)
            pairs.append((expr, value))
    return pairs


def samples_of(path: Path, name: str = BENCH) -> list[dict]:
    """One benchmark's records of a results folder's samples.jsonl (eval.run's)."""
    return [r for r in map(json.loads, path.read_text().splitlines()) if r["benchmark"] == name]


def heldout_answers(heldout_dir: Path, name: str = BENCH) -> dict[str, str]:
    """Question id -> ground truth of one held-out file, as eval.run numbers the questions."""
    from eval import benchmarks as bm

    return {q.id: q.answer for q in bm.load(name, data_dir=heldout_dir).questions}


def correct_by_question(
    samples: Path, answers: dict[str, str] | None = None, name: str = BENCH
) -> dict[str, float]:
    """Question id -> mean correctness: under the training reward's rule (eval.run's `correct`), or
    given the ground truths, under the second rule."""
    per_question: dict[str, list[float]] = {}
    for r in samples_of(samples, name):
        qid = str(r["question_id"])
        ok = r["correct"] if answers is None else second_rule_correct(r["response"], answers[qid])
        per_question.setdefault(qid, []).append(float(ok))
    return {q: sum(v) / len(v) for q, v in per_question.items()}


# ------------------------------------------------------------------ the second grading rule
# Written apart from the project's grader (rewards/), so that a gain that holds under only one rule
# shows: the answer is the last number inside the last non-empty \boxed{...}, else the last number
# of the response; correct when it equals the ground truth as a number.
_BOXED = re.compile(r"\\boxed\s*\{")
_NUMBER = re.compile(r"-?\d[\d,]*(?:\.\d+)?")


def last_nonempty_boxed(text: str) -> str | None:
    """The content of the last \\boxed{...} with something in it (braces balanced), or None."""
    found = None
    for m in _BOXED.finditer(text):
        depth, i = 1, m.end()
        while i < len(text) and depth:
            depth += {"{": 1, "}": -1}.get(text[i], 0)
            i += 1
        content = text[m.end() : i - 1].strip() if depth == 0 else ""
        found = content or found
    return found


def second_rule_answer(text: str) -> str | None:
    """The number the second rule reads in a response, or None when there is none."""
    boxed = last_nonempty_boxed(text)
    numbers = _NUMBER.findall(boxed if boxed is not None else text)
    if not numbers and boxed is not None:
        numbers = _NUMBER.findall(text)
    return numbers[-1].replace(",", "") if numbers else None


def second_rule_correct(text: str, truth: str) -> bool:
    answer = second_rule_answer(text)
    try:
        return answer is not None and float(answer) == float(str(truth).replace(",", ""))
    except ValueError:
        return False


def second_rule_accuracy(samples: Path, answers: dict[str, str], name: str = BENCH) -> float:
    """Mean second-rule correctness of one benchmark's samples, per question then over questions
    (as eval.run's per-question average)."""
    per_question = correct_by_question(samples, answers, name)
    return sum(per_question.values()) / len(per_question)
