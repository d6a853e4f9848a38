"""The data mappers (recipes/tools/data/sources.py) and the benchmark loaders (eval/benchmarks.py) on
real rows of each source (tests/fixtures/real_rows/README.md names where each row was read): the
rows become ours with the published question and answer, and the grader credits each published
answer as a model writes it, `\\boxed{...}`, and not a wrong one. The rows were copied unchanged,
awkward ones included; the hand-made shapes are tests/test_data.py's and tests/test_eval_data.py's.

`prepare` downloads with HF `datasets` and then applies `build_prepared`; these tests give
`build_prepared` the rows as the download would (`Source.load` reads only from the hub). The
loaders are read through their real local entry point, `eval.benchmarks.load(name, data_dir)`.
An expected failure (`xfail`, strict) is a defect these rows show; its fix is in its reason."""

import json
from pathlib import Path

import pytest

from eval import benchmarks as bm
from eval.grading import grade_responses
from eval.run import render_prompt
from prompt_aug.templates import render_chatml
from recipes.tools.data.schema import INSTRUCTION, validate_rows
from recipes.tools.data.sources import build_prepared
from rewards.extract import normalize_ground_truth

REAL = Path(__file__).resolve().parent / "fixtures" / "real_rows"


def rows(name: str) -> list[dict]:
    return [json.loads(line) for line in (REAL / name).read_text(encoding="utf-8").splitlines()]


def credit(grader, golds, rights, wrongs) -> list[float]:
    """`acc` of each right response, then of each wrong one, against the ground truths, as training
    and evaluation grade math (`boxed`: only the last box counts)."""
    results = grader.grade_batch(list(rights) + list(wrongs), list(golds) * 2, mode="boxed")
    return [r["acc"] for r in results]


def check_rows(rows_out, questions, answers, data_source, split):
    """Our rows hold the published question (and, in the prompt, only it and our instruction), the
    published answer, the dataset's name and indices 0..n-1."""
    assert validate_rows(rows_out) == len(questions)
    for i, (row, question, answer) in enumerate(zip(rows_out, questions, answers, strict=True)):
        assert row["data_source"] == data_source
        assert row["extra_info"] == {"index": i, "split": split, "question": question}
        assert row["prompt"] == [{"role": "user", "content": question + INSTRUCTION}]
        assert row["reward_model"] == {"style": "rule", "ground_truth": answer}


# ---------------------------------------------------------------------------------------- data


def test_simplerl_zoo_rows_map_to_ours_without_their_baked_in_prompt(grader):
    train_raw = rows("simplerl_zoo_l3to5_train.jsonl")
    test_raw = rows("simplerl_zoo_l3to5_test.jsonl")
    train, test, counts = build_prepared("math_l3to5", train_raw, test_raw)
    assert counts == {
        "train_source": 6,
        "train_unusable": 1,  # row 5054: no answer anywhere in the row
        "test_source": 5,
        "test_unusable": 0,
        "train_in_test": 0,
        "train": 5,
        "test": 5,
    }
    kept = [r for r in train_raw if r["gt_answer"]]
    check_rows(
        train,
        [r["question"] for r in kept],
        [r["gt_answer"] for r in kept],
        "math_l3to5",
        "train",
    )
    check_rows(  # test rows carry the question and answer only inside extra_info / reward_model
        test,
        [r["extra_info"]["question"] for r in test_raw],
        [r["reward_model"]["ground_truth"] for r in test_raw],
        "math_l3to5",
        "test",
    )
    assert "<|im_start|>" in train_raw[0]["prompt"][0]["content"]  # theirs: Qwen's template baked in
    assert "\\boxed{{}}" in train_raw[0]["prompt"][0]["content"]
    assert not any("<|im_start|>" in r["prompt"][-1]["content"] for r in train + test)
    assert train[0]["extra_info"]["question"].startswith("Let $a$ and $b$ be the two real values of $x$")

    golds = [r["reward_model"]["ground_truth"] for r in train + test]
    assert golds == [
        "118",
        "\\text{Tuesday}",
        "4, 0, -4",
        "(-\\infty, -27) \\cup [-8, -1]",
        "\\text{(D)}",
        "-2 + 7i",
        "52_8",
        "10,\\!080",
        "\\$32,\\!348",
        "x \\in [-2,7]",
    ]
    rights = [f"So the answer is $\\boxed{{{g}}}$." for g in golds]
    wrongs = [
        "\\boxed{119}",
        "\\boxed{\\text{Monday}}",
        "\\boxed{4}",  # one of the three values
        "\\boxed{(-\\infty, -27) \\cup (-8, -1)}",
        "\\boxed{\\text{(C)}}",
        "\\boxed{2 - 7i}",
        "\\boxed{53_8}",
        "\\boxed{10,\\!081}",
        "\\boxed{\\$32,\\!349}",
        "\\boxed{x \\in [-2,8]}",
    ]
    assert credit(grader, golds, rights, wrongs) == [1.0] * 10 + [0.0] * 10


def test_math_train_rows_take_the_last_box_of_the_solution(grader):
    raw = rows("hendrycks_math_train.jsonl")
    train, test, counts = build_prepared("math", raw, rows("math500.jsonl"))
    assert (counts["train_source"], counts["train_unusable"], counts["train"]) == (6, 1, 5)
    assert raw[4]["solution"].endswith("there are $\\boxed{}$ primes in that range.")  # dropped
    questions = [r["problem"] for i, r in enumerate(raw) if i != 4]
    golds = [
        "\\text{Tuesday}",
        "2",  # `$\boxed 2$`: a box without braces
        "\\frac{\\sqrt[3]{4}}{6}",
        "3 \\sqrt{3} + 5",
    ]
    # the last row's answer: test_math_train_several_boxed_answers_are_one_answer
    check_rows(train[:4], questions[:4], golds, "math", "train")
    assert train[4]["extra_info"] == {"index": 4, "split": "train", "question": questions[4]}
    assert all(r["data_source"] == "math500" for r in test)
    rights = [f"\\boxed{{{g}}}" for g in golds]
    wrongs = [
        "\\boxed{\\text{Monday}}",
        "\\boxed{\\frac{1}{2}}",  # the other root
        "\\boxed{\\frac{\\sqrt[3]{2}}{6}}",
        "\\boxed{3\\sqrt{3} - 5}",
    ]
    assert credit(grader, golds, rights, wrongs) == [1.0] * 4 + [0.0] * 4


def test_math_train_several_boxed_answers_are_one_answer(grader):
    train, _, _ = build_prepared("math", rows("hendrycks_math_train.jsonl"), rows("math500.jsonl"))
    row = train[4]
    assert row["extra_info"]["question"].startswith("Two parabolas are the graphs of the equations")
    gold = row["reward_model"]["ground_truth"]
    assert credit(grader, [gold], ["\\boxed{(-2,18); (8,38)}"], ["\\boxed{(8,38)}"]) == [1.0, 0.0]


def test_deepscaler_rows_map_to_ours(grader):
    raw = rows("deepscaler_train.jsonl")
    train, test, counts = build_prepared("deepscaler", raw, rows("math500.jsonl"))
    assert (counts["train_source"], counts["train_unusable"], counts["train"]) == (6, 1, 5)  # answer ""
    kept = [r for r in raw if r["answer"]]
    golds = ["60", "(3, -1)", "[0,3)", "2, 3, \\text{ and } 4", "20\\text{ miles}"]
    assert [r["answer"] for r in kept] == golds
    check_rows(train, [r["problem"] for r in kept], golds, "deepscaler", "train")
    assert [r["data_source"] for r in test] == ["math500"] * 5
    rights = ["\\boxed{60}", "\\boxed{(3,-1)}", "\\boxed{[0,3)}", "\\boxed{2, 3, 4}", "\\boxed{20}"]
    wrongs = ["\\boxed{40}", "\\boxed{(-3,1)}", "\\boxed{[0,3]}", "\\boxed{2, 3}", "\\boxed{30}"]
    assert credit(grader, golds, rights, wrongs) == [1.0] * 5 + [0.0] * 5


def test_math500_rows_are_the_validation_split_and_the_benchmark(grader):
    raw = rows("math500.jsonl")
    golds = [r["answer"] for r in raw]
    assert golds == [
        "\\left( 3, \\frac{\\pi}{2} \\right)",
        "\\text{Evelyn}",
        "90^\\circ",
        "\\{1\\pm\\sqrt{5},-2\\}",
        "3, 5, 7",
    ]
    _, test, _ = build_prepared("math", rows("hendrycks_math_train.jsonl"), raw)
    check_rows(test, [r["problem"] for r in raw], golds, "math500", "test")

    bench = bm.load("math500", data_dir=REAL)
    assert (bench.name, bench.kind, bench.source) == ("math500", "math", str(REAL / "math500.jsonl"))
    assert [q.id for q in bench.questions] == [r["unique_id"] for r in raw]
    assert [q.problem for q in bench.questions] == [r["problem"] for r in raw]
    assert [q.answer for q in bench.questions] == golds
    rights = [
        "\\boxed{\\left(3,\\frac{\\pi}{2}\\right)}",
        "\\boxed{\\text{Evelyn}}",
        "\\boxed{90^\\circ}",
        "\\boxed{\\{1\\pm\\sqrt{5},-2\\}}",
        "\\boxed{3, 5, 7}",
    ]
    wrongs = [
        "\\boxed{(3, \\pi)}",
        "\\boxed{\\text{Carla}}",
        "\\boxed{45^\\circ}",
        "\\boxed{\\{1\\pm\\sqrt{5},2\\}}",
        "\\boxed{3, 7}",
    ]
    results = grade_responses("math", rights + wrongs, bench.questions * 2, "boxed", grader)
    assert [r["acc"] for r in results] == [1.0] * 5 + [0.0] * 5


# ---------------------------------------------------------------------------------- benchmarks

# name -> (ids, the published answers as the loader returns them, their normalized ground
# truths, responses credited, responses not credited)
BENCHMARKS = {
    "aime24": (
        ["60", "67", "84"],
        ["204", "025", "033"],
        [("204",), ("025",), ("033",)],
        ["\\boxed{204}", "\\boxed{25}", "\\boxed{33}"],
        ["\\boxed{205}", "\\boxed{52}", "\\boxed{330}"],
    ),
    "aime25": (
        ["0", "1", "2"],  # no id column: row positions
        ["70", "106", "336"],
        [("70",), ("106",), ("336",)],
        ["\\boxed{70}", "\\boxed{106}", "\\boxed{336}"],
        ["\\boxed{7}", "\\boxed{107}", "\\boxed{363}"],
    ),
    "amc": (
        ["0", "1", "2", "3"],  # this copy has no id column
        [142.0, -4.0, 0.0, 27.0],
        [("142",), ("-4",), ("0",), ("27",)],
        ["\\boxed{142}", "\\boxed{-4}", "\\boxed{0}", "\\boxed{27}"],
        ["\\boxed{141}", "\\boxed{4}", "\\boxed{1}", "\\boxed{18}"],
    ),
    "amc23": (
        ["0", "3", "17"],
        [27.0, 3159.0, -1.0],
        [("27",), ("3159",), ("-1",)],
        ["\\boxed{27}", "\\boxed{3159}", "\\boxed{-1}"],
        ["\\boxed{18}", "\\boxed{3160}", "\\boxed{1}"],
    ),
    "minerva": (
        ["1", "5", "9", "12", "38"],
        [
            "4.5e33",
            "np.arcsin(10/13)",
            "9.6",
            "\\frac{2 \\pi c^{2} R^{2}}{\\lambda^{5}\\left[e^{h c /(\\lambda k T)}-1\\right] d^{2}}",
            "-1./3",
        ],
        [  # the first, second and last: test_minerva_answers_written_in_latex_are_credited
            None,
            None,
            ("9.6",),
            ("\\frac{2 \\pi c^{2} R^{2}}{\\lambda^{5}\\left[e^{h c /(\\lambda k T)}-1\\right] d^{2}}",),
            None,
        ],
        [  # the published text, boxed (a LaTeX form of the first, second and last: the xfail below)
            "\\boxed{4.5e33}",
            "\\boxed{np.arcsin(10/13)}",
            "\\boxed{9.6}",
            "\\boxed{\\frac{2 \\pi c^{2} R^{2}}{\\lambda^{5}\\left[e^{h c /(\\lambda k T)}-1\\right] d^{2}}}",
            "\\boxed{-1./3}",
        ],
        [
            "\\boxed{4.6e33}",
            "\\boxed{np.arcsin(12/13)}",
            "\\boxed{9.7}",
            "\\boxed{\\frac{2 \\pi c^{2} R^{2}}{\\lambda^{5}\\left[e^{h c /(\\lambda k T)}+1\\right] d^{2}}}",
            "\\boxed{-2./3}",
        ],
    ),
    "olympiadbench": (
        ["1606", "1618", "1664", "2349", "2419"],
        [["2"], ["$(1,8,19), (2,7,13), (4,5,7)$"], ["$69$,$84$"], ["$221,$8$"], ["$166$"]],
        [("2",), ("(1,8,19), (2,7,13), (4,5,7)",), ("69$,$84",), ("221,$8",), ("166",)],
        [
            "\\boxed{2}",
            "\\boxed{(1,8,19), (2,7,13), (4,5,7)}",
            "\\boxed{69, 84}",
            "\\boxed{221, 8}",  # m = 221, n = 8; the source's `$221,$8$` is malformed
            "\\boxed{166}",
        ],
        [  # one of several answers is not all of them
            "\\boxed{3}",
            "\\boxed{(1,8,19)}",
            "\\boxed{69}",
            "\\boxed{221}",
            "\\boxed{165}",
        ],
    ),
}


@pytest.mark.parametrize("name", sorted(BENCHMARKS))
def test_benchmark_rows_load_and_grade(name, grader):
    ids, answers, normalized, rights, wrongs = BENCHMARKS[name]
    raw = rows(f"{name}.jsonl")
    bench = bm.load(name, data_dir=REAL)
    assert (bench.name, bench.kind, bench.source) == (name, "math", str(REAL / f"{name}.jsonl"))
    assert [q.id for q in bench.questions] == ids
    column = "question" if name == "olympiadbench" else "problem"
    for q, r in zip(bench.questions, raw, strict=True):  # damaged text: the aime25 xfail below
        assert q.problem == r[column] or any(c in r[column] for c in "\x08\x0c\t")
    assert [q.answer for q in bench.questions] == answers
    for q, expected in zip(bench.questions, normalized, strict=True):
        assert expected is None or normalize_ground_truth(q.answer) == expected
    for q in bench.questions:  # the prompt holds the problem as published
        assert render_prompt("raw", q.problem, tokenizer=None) == q.problem
        assert q.problem in render_chatml("qwen-math", q.problem)
    results = grade_responses("math", rights + wrongs, bench.questions * 2, "boxed", grader)
    n = len(ids)
    assert [r["acc"] for r in results] == [1.0] * n + [0.0] * n
    assert {r["status"] for r in results} == {"ok"}


def test_minerva_answers_written_in_latex_are_credited(grader):
    bench = bm.load("minerva", data_dir=REAL)
    questions = [bench.questions[i] for i in (0, 1, 4)]
    assert [normalize_ground_truth(q.answer) for q in questions] == [
        ("4.5\\times 10^{33}",),
        ("\\arcsin(10/13)",),
        ("-1/3",),
    ]
    rights = ["\\boxed{4.5 \\times 10^{33}}", "\\boxed{\\arcsin(10/13)}", "\\boxed{-\\frac{1}{3}}"]
    wrongs = ["\\boxed{4.6 \\times 10^{33}}", "\\boxed{\\arccos(10/13)}", "\\boxed{\\frac{1}{3}}"]
    results = grade_responses("math", rights + wrongs, questions * 2, "boxed", grader)
    assert [r["acc"] for r in results] == [1.0] * 3 + [0.0] * 3


def test_aime25_problem_text_reaches_the_model_with_its_latex():
    bench = bm.load("aime25", data_dir=REAL)
    product, triangle = bench.questions[1].problem, bench.questions[2].problem
    assert "\\prod^{63}_{k=4} \\frac{\\log_k (5^{k^2 - 1})}" in product
    assert product.count("\\frac{") == 5  # the five form feeds
    assert "The circumcircle of $\\triangle DEF$" in triangle
    assert not any(c in q.problem for q in bench.questions for c in "\x0c\x08\t")
