"""eval.benchmarks and eval.grading without a model: loaders (local JSONL, HF `datasets`), clear
errors on bad rows, GPQA's seeded choice order, letter grading, and math grading through the
project's grader. Fast (a few seconds, most of it the grader's worker start)."""

import json
from collections import Counter
from pathlib import Path

import datasets
import pytest

from eval import benchmarks as bm
from eval.grading import LETTERS, choice_letter, grade_choice, grade_responses

FIXTURES = Path(__file__).resolve().parent / "fixtures" / "eval"


def write_jsonl(path: Path, rows: list[dict]) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def test_local_fixtures_load_with_ids_answers_and_kinds():
    arith = bm.load("arith", FIXTURES)
    assert arith.kind == "math" and arith.source == str(FIXTURES / "arith.jsonl")
    assert [q.id for q in arith.questions] == ["a1", "a2", "a3", "a4", "a5", "a6"]
    assert arith.questions[1].problem == "What is 3 + 4?" and arith.questions[1].answer == "7"
    mixed = bm.load("mixed", FIXTURES)
    assert [q.id for q in mixed.questions] == ["0", "1", "2", "3"]  # no id column: row positions
    assert [q.answer for q in mixed.questions] == [["12\n"], 12.0, "\\frac{1}{2}", "['21']"]
    assert [q.id for q in bm.load("arith", FIXTURES, limit=2).questions] == ["a1", "a2"]


def test_gpqa_choices_are_shuffled_reproducibly_and_lettered():
    gpqa = bm.load("gpqa_diamond", FIXTURES)
    assert gpqa.kind == "choice" and [q.id for q in gpqa.questions] == ["g1", "g2", "g3"]
    rows = bm.read_jsonl(FIXTURES / "gpqa_diamond.jsonl")
    for q, row in zip(gpqa.questions, rows, strict=True):
        assert sorted(q.choices) == sorted(row[k] for k in row if "Answer" in k)
        assert q.choices[LETTERS.index(q.answer)] == row["Correct Answer"]
        assert q.problem.startswith(row["Question"] + "\n\n(A) ")
        assert f"({q.answer}) {row['Correct Answer']}\n" in q.problem
        assert q.problem.endswith(bm.CHOICE_INSTRUCTION)
    assert [q.choices for q in bm.load("gpqa_diamond", FIXTURES).questions] == [
        q.choices for q in gpqa.questions
    ]
    # over many questions the correct answer lands on every letter (not always "A")
    many = [
        {"Record ID": f"r{i}", "Question": f"Q{i}?", "Correct Answer": "right"}
        | {f"Incorrect Answer {j}": f"wrong {j}" for j in (1, 2, 3)}
        for i in range(40)
    ]
    letters = Counter(q.answer for q in bm.from_rows("gpqa_diamond", many, "many").questions)
    assert set(letters) == {"A", "B", "C", "D"} and max(letters.values()) < 20


def test_choice_rows_in_other_shapes():
    rows = [
        {"problem": "Pick the even number.", "choices": ["3", "4", "5"], "answer": "B"},
        {"problem": "Pick the odd number.", "choices": ["3", "4", "5"], "answer": 0},
        {"problem": "Pick the odd number.", "choices": ["3", "4", "5"], "answer": "5"},
    ]
    b = bm.from_rows("mc", rows, "mc.jsonl")
    assert b.kind == "choice" and [q.answer for q in b.questions] == ["B", "A", "C"]
    assert "(A) 3\n(B) 4\n(C) 5" in b.questions[0].problem
    lettered = bm.from_rows("gpqa_diamond", [{"problem": "Q (A) x (B) y", "solution": "\\boxed{B}"}], "hub")
    assert lettered.questions[0].answer == "B" and lettered.questions[0].problem == "Q (A) x (B) y"


def test_missing_column_names_the_column_the_row_and_the_file(tmp_path):
    path = write_jsonl(
        tmp_path / "bad.jsonl", [{"problem": "1+1?", "answer": "2"}, {"problem": "2+2?", "ans": "4"}]
    )
    with pytest.raises(bm.BenchmarkError) as e:
        bm.load("bad", tmp_path)
    msg = str(e.value)
    assert str(path) in msg and "row 1" in msg and "'answer'" in msg and "['ans', 'problem']" in msg
    write_jsonl(tmp_path / "noq.jsonl", [{"text": "1+1?", "answer": "2"}])
    with pytest.raises(bm.BenchmarkError, match=r"noq.jsonl row 0: no question .*'problem', 'question'"):
        bm.load("noq", tmp_path)
    (tmp_path / "broken.jsonl").write_text('{"problem": "1+1?", "answer": "2"}\n{"problem": \n')
    with pytest.raises(bm.BenchmarkError, match=r"broken.jsonl: line 2 is not JSON"):
        bm.load("broken", tmp_path)
    gpqa = {"Record ID": "x", "Question": "Q?", "Correct Answer": "a", "Incorrect Answer 1": "b"}
    write_jsonl(tmp_path / "gpqa_diamond.jsonl", [gpqa | {"Incorrect Answer 2": "c"}])
    with pytest.raises(bm.BenchmarkError, match=r"row 0: empty or missing column 'Incorrect Answer 3'"):
        bm.load("gpqa_diamond", tmp_path)
    with pytest.raises(bm.BenchmarkError, match=r"none of aime24.jsonl, aime.jsonl in"):
        bm.load("aime24", tmp_path)
    with pytest.raises(bm.BenchmarkError, match=r"unknown benchmark 'aime26'"):
        bm.load("aime26")


def test_a_number_past_pythons_digit_limit_or_a_row_nested_too_deep_names_the_line(tmp_path):
    """A 5,000-digit answer (past Python's 4,300-digit limit for int) or a row nested 100,000 deep
    was a traceback (ValueError, RecursionError) from eval.run; both name the file and the line."""
    ok = json.dumps({"problem": "1+1?", "answer": "2"})
    (tmp_path / "big.jsonl").write_text(ok + "\n" + '{"problem": "p", "answer": ' + "9" * 5000 + "}\n")
    with pytest.raises(
        bm.BenchmarkError,
        match=r"big.jsonl: line 2 holds a number Python will not read .*"
        r"write it as a string",
    ):
        bm.load("big", tmp_path)
    (tmp_path / "deep.jsonl").write_text('{"problem": ' + "[" * 100_000 + "]" * 100_000 + "}\n")
    with pytest.raises(bm.BenchmarkError, match=r"deep.jsonl: line 1 is nested too deep to read"):
        bm.load("deep", tmp_path)
    (tmp_path / "digits.jsonl").write_text(json.dumps({"problem": "p", "answer": "9" * 5000}) + "\n")
    assert bm.load("digits", tmp_path).questions[0].answer == "9" * 5000  # as a string it is read


def test_aliases_match_the_shared_benchmark_file_names(tmp_path):
    write_jsonl(tmp_path / "aime.jsonl", [{"problem": "p", "answer": "204"}])
    write_jsonl(tmp_path / "olympiad_bench.jsonl", [{"problem": "p", "answer": ["2"]}])
    assert bm.load("aime24", tmp_path).questions[0].answer == "204"
    assert bm.load("olympiadbench", tmp_path).questions[0].answer == ["2"]
    assert set(bm.DEFAULT_SUITE) <= set(bm.SPECS) and len(bm.DEFAULT_SUITE) == 5
    assert sum(bm.SPECS[n].size for n in bm.DEFAULT_SUITE) == 1560  # the paper's 1,560 questions


def test_hub_loader_uses_datasets_and_falls_back_to_the_next_source(tmp_path, monkeypatch):
    """The hub path through the real `datasets.load_dataset`: an id that cannot be reached (offline
    mode) is reported and the next source, a dataset folder in the hub's layout, is used."""
    monkeypatch.setattr(datasets.config, "HF_HUB_OFFLINE", True)
    monkeypatch.setattr(datasets.config, "HF_DATASETS_CACHE", tmp_path / "hf_cache")  # not ~/.cache
    folder = tmp_path / "amc_copy"
    (folder / "data").mkdir(parents=True)
    rows = [{"id": 7, "problem": "p1", "answer": 142.0}, {"id": 9, "problem": "p2", "answer": 3.0}]
    datasets.Dataset.from_list(rows).to_parquet(str(folder / "data" / "train-00000-of-00001.parquet"))
    spec = bm.Spec("amc", 2, (bm.Source("no-such-org/no-such-set", "test"), bm.Source(str(folder), "train")))
    monkeypatch.setitem(bm.SPECS, "amc", spec)
    b = bm.load("amc")
    assert b.source == f"{folder} (train)"
    assert [(q.id, q.problem, q.answer) for q in b.questions] == [("7", "p1", 142.0), ("9", "p2", 3.0)]
    monkeypatch.setitem(bm.SPECS, "amc", bm.Spec("amc", 2, spec.sources[:1]))
    with pytest.raises(
        bm.BenchmarkError, match=r"(?s)no-such-org/no-such-set \(test\): ConnectionError.*--data-dir"
    ):
        bm.load("amc")


@pytest.mark.parametrize(
    ("response", "mode", "pred", "acc", "status"),
    [
        ("Reasoning... so the answer is $\\boxed{B}$.", "boxed", "B", 1.0, "ok"),
        ("\\boxed{(B)}", "boxed", "B", 1.0, "ok"),
        ("\\boxed{\\text{(B) 6}}", "boxed", "B", 1.0, "ok"),
        ("\\boxed{\\textbf{B}}", "boxed", "B", 1.0, "ok"),
        ("\\boxed{6}", "boxed", "B", 1.0, "ok"),  # the correct choice's text
        ("\\boxed{ 12 }", "boxed", "A", 0.0, "ok"),  # another choice's text
        ("\\boxed{C}", "boxed", "C", 0.0, "ok"),
        ("\\boxed{B} and later \\boxed{D}", "boxed", "D", 0.0, "ok"),  # the last box counts
        ("\\boxed{42}", "boxed", "42", 0.0, "ok"),  # no choice: kept as said, wrong
        ("The answer is (B).", "boxed", "", 0.0, "no_answer"),  # boxed mode needs a box
        ("The answer is (B).", "lenient", "B", 1.0, "ok"),
        ("I think (A) is wrong and (B) holds", "lenient", "B", 1.0, "ok"),
        ("\\boxed{B}<|im_end|>\\boxed{C}", "boxed", "B", 1.0, "ok"),  # cut at the stop string
    ],
)
def test_gpqa_letter_grading(response, mode, pred, acc, status):
    choices = ("12", "6", "8", "14")
    assert grade_choice(response, "B", choices, mode) == {"acc": acc, "pred": pred, "status": status}


def test_choice_letter_prefers_a_choice_text_that_starts_like_a_letter():
    choices = ("A decrease in volume", "An increase", "No change", "It doubles")
    assert choice_letter("A decrease in volume", choices) == "A"
    assert choice_letter("it  DOUBLES", choices) == "D"
    assert choice_letter("A decrease", choices) is None  # neither a letter nor a choice
    assert choice_letter("E", choices) is None and choice_letter("E", choices + ("x",)) == "E"


def test_math_grading_through_the_project_grader(grader):
    questions = bm.load("mixed", FIXTURES).questions  # answers ["12\n"], 12.0, \frac{1}{2}, "['21']"
    responses = ["so \\boxed{12}", "\\boxed{12.0}", "\\boxed{0.5}", "The answer is 21."]
    boxed = grade_responses("math", responses, questions, "boxed", grader)
    assert [r["acc"] for r in boxed] == [1.0, 1.0, 1.0, 0.0]
    assert boxed[3] == {"acc": 0.0, "pred": "", "status": "no_answer"}
    lenient = grade_responses("math", responses, questions, "lenient", grader)
    assert [r["acc"] for r in lenient] == [1.0, 1.0, 1.0, 1.0] and lenient[3]["pred"] == "21"
    wrong = grade_responses(
        "math", ["\\boxed{13}", "\\boxed{11}", "\\boxed{2}", "\\boxed{20}"], questions, "boxed", grader
    )
    assert [r["acc"] for r in wrong] == [0.0] * 4 and [r["pred"] for r in wrong] == ["13", "11", "2", "20"]
    gpqa = bm.load("gpqa_diamond", FIXTURES).questions
    letters = [q.answer for q in gpqa]
    graded = grade_responses("choice", [f"\\boxed{{{x}}}" for x in letters], gpqa, "boxed", grader)
    assert [r["acc"] for r in graded] == [1.0, 1.0, 1.0]
    with pytest.raises(ValueError, match="2 responses for 3 questions"):
        grade_responses("choice", ["a", "b"], gpqa, "boxed", grader)
