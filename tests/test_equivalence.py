"""Equivalence through the real grading pool (math-verify in worker processes): each kind of
answer the issue names, right and wrong."""

import pytest

# (ground truth, response, correct?)
CASES = [
    # integers
    ("42", "\\boxed{42}", True),
    ("42", "\\boxed{43}", False),
    ("-3", "\\boxed{3}", False),
    # decimals vs fractions
    ("0.5", "\\boxed{\\frac{1}{2}}", True),
    ("\\frac{1}{2}", "\\boxed{0.5}", True),
    ("\\frac{1}{3}", "\\boxed{0.5}", False),
    ("\\dfrac{14}{3}", "\\boxed{\\frac{14}{3}}", True),
    # LaTeX expressions
    ("2\\sqrt{2}", "\\boxed{\\sqrt{8}}", True),
    ("x^2+2x+1", "\\boxed{(x+1)^2}", True),
    ("x^2+2x+1", "\\boxed{(x+1)^3}", False),
    ("p - q", "\\boxed{p-q}", True),
    # intervals
    ("(0,1]", "\\boxed{(0, 1]}", True),
    ("(0,1]", "\\boxed{[0,1]}", False),
    ("(-\\infty, 3) \\cup (5, \\infty)", "\\boxed{(-\\infty,3)\\cup(5,\\infty)}", True),
    # sets and tuples
    ("\\{1,2,3\\}", "\\boxed{\\{3,2,1\\}}", True),
    ("\\{1,2\\}", "\\boxed{\\{1,3\\}}", False),
    ("(1,2)", "\\boxed{(1, 2)}", True),
    ("(1,2)", "\\boxed{(2,1)}", False),
    # matrices
    (
        "\\begin{pmatrix} 1 & 2 \\\\ 3 & 4 \\end{pmatrix}",
        "\\boxed{\\begin{pmatrix}1&2\\\\3&4\\end{pmatrix}}",
        True,
    ),
    (
        "\\begin{pmatrix} 1 & 2 \\\\ 3 & 4 \\end{pmatrix}",
        "\\boxed{\\begin{pmatrix}1&2\\\\3&5\\end{pmatrix}}",
        False,
    ),
    # degrees
    ("30^\\circ", "\\boxed{30}", True),
    ("30", "\\boxed{30^{\\circ}}", True),
    ("30^\\circ", "\\boxed{31^\\circ}", False),
    # percents
    ("50\\%", "\\boxed{50}", True),
    ("50", "\\boxed{50\\%}", True),
    ("50\\%", "\\boxed{51\\%}", False),
    # \text{} answers
    ("\\text{Evelyn}", "\\boxed{\\text{Evelyn}}", True),
    ("\\text{Evelyn}", "\\boxed{Evelyn}", True),
    ("\\text{(C)}", "\\boxed{C}", True),
    ("\\text{(C)}", "\\boxed{\\text{(D)}}", False),
    # ground truths stored as Python-list strings (Minerva, OlympiadBench) and several answers
    ("['9.6\\n']", "\\boxed{9.6}", True),
    ("['9.6\\n']", "\\boxed{9.7}", False),
    (["$2^{1009}$"], "\\boxed{2^{1009}}", True),
    ("['3', '-3']", "\\boxed{-3}", True),
    (["3", "-3"], "\\boxed{4}", False),
    # numbers from a dataset column (AMC stores floats)
    (142.0, "\\boxed{142}", True),
]


@pytest.mark.parametrize("gold,response,correct", CASES)
def test_equivalence(grader, gold, response, correct):
    result = grader.grade(response, gold, mode="boxed")
    assert result["status"] == "ok", result
    assert result["acc"] == float(correct), (gold, response, result)


def test_batch_matches_single_calls(grader):
    golds = [g for g, _, _ in CASES]
    responses = [r for _, r, _ in CASES]
    results = grader.grade_batch(responses, golds, mode="boxed")
    assert [r["acc"] for r in results] == [float(c) for _, _, c in CASES]


def test_ground_truth_parsed_once_per_question(grader):
    grader.reset_stats()
    responses = [f"\\boxed{{\\sqrt{{{k}}}}}" for k in range(9, 17)]  # 8 answers math-verify must judge
    results = grader.grade_batch(responses, ["2\\sqrt{3}"] * 8)  # a question no other test grades
    assert [r["acc"] for r in results] == [float(k == 12) for k in range(9, 17)]
    assert (grader.gold_parses, grader.gold_cache_hits) == (1, 7)


@pytest.mark.parametrize(
    "response,mode,acc",
    [
        ("so the final answer is 7", "lenient", 1.0),
        ("so the final answer is 7", "boxed", 0.0),
        ("3 plus 4 gives 7", "lenient", 1.0),
        ("3 plus 4 gives 7", "boxed", 0.0),
    ],
)
def test_modes(grader, response, mode, acc):
    result = grader.grade(response, "7", mode=mode)
    assert result["acc"] == acc
    assert result["status"] == ("ok" if acc else "no_answer")


def _numeric_forms(rng, value):
    """Several spellings of the rational `value` (as plain-number answers are written)."""
    from fractions import Fraction

    value = Fraction(value)
    sign = "-" if value < 0 else ""
    num, den = abs(value.numerator), value.denominator
    forms = [
        f"{sign}\\frac{{{num}}}{{{den}}}",
        f"{sign}{num}/{den}",
        f"{sign}\\dfrac{{{2 * num}}}{{{2 * den}}}",
    ]
    if den == 1:
        forms += [f"{value}", f"{value}^\\circ", f"{value}.0"]
    if 10**6 % den == 0:
        forms.append(f"{sign}{num / den:.6f}".rstrip("0"))
    return [f for f in forms if not f.endswith(".")]


def test_numeric_fast_path_agrees_with_math_verify():
    """The grader decides plain-number pairs without math-verify; on random pairs (equal values
    spelled differently, and near misses) its verdict must equal math-verify's."""
    import random
    from fractions import Fraction

    from rewards import _mathverify
    from rewards.grade import _numeric_verdict

    rng = random.Random(0)
    checked = 0
    for _ in range(150):
        den = rng.choice([1, 1, 2, 4, 5, 8, 3, 7])
        value = Fraction(rng.randint(-500, 500), den)
        other = (
            value
            if rng.random() < 0.5
            else value + rng.choice([Fraction(1), Fraction(1, 1000), -Fraction(1, 3)])
        )
        gold = rng.choice(_numeric_forms(rng, value))
        pred = rng.choice(_numeric_forms(rng, other))
        fast = _numeric_verdict(pred, (gold,))
        assert fast is not None, (pred, gold)
        blob, _ = _mathverify.parse_gold((gold,))
        assert fast == _mathverify.verify_answer(blob, pred), (gold, pred)
        checked += 1
    assert checked == 150


@pytest.mark.parametrize("pred,golds", [("2", ("\\sqrt{4}",)), ("x", ("1",)), ("1,000", ("1000",))])
def test_numeric_fast_path_defers_to_math_verify(grader, pred, golds):
    from rewards.grade import _numeric_verdict

    assert _numeric_verdict(pred, golds) is None
    assert grader.grade(f"\\boxed{{{pred}}}", list(golds))["acc"] == float(pred != "x")


@pytest.mark.parametrize(
    "pred,gold,acc",
    [
        ("(1,2]", "(1, 2]", 1.0),
        ("x^2 + 3x", "x^2+3x", 1.0),
        ("(2,1]", "(1, 2]", 0.0),
    ],
)
def test_whitespace_insensitive_match(grader, pred, gold, acc):
    from rewards.grade import _squeeze

    assert grader.grade(f"\\boxed{{{pred}}}", gold)["acc"] == acc
    assert _squeeze(" ( 1 , 2 ] ") == "(1,2]"
    assert _squeeze("\\text{New York}") == "\\text{New York}"  # spaces inside \\text{} are kept
