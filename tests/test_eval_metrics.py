"""eval.metrics: pass@k against brute-force enumeration of all k-subsets, and the per-benchmark
and per-question averages against hand-computed values on a fixture where they differ."""

import itertools
import random

import pytest

from eval.metrics import pass_at_k, spread, summarize


def brute_pass_at_k(verdicts: list[bool], k: int) -> float:
    """The share of all k-subsets of the n samples that contain a correct one."""
    subsets = list(itertools.combinations(range(len(verdicts)), k))
    return sum(any(verdicts[i] for i in s) for s in subsets) / len(subsets)


def test_pass_at_k_equals_enumeration_over_all_k_subsets():
    rng = random.Random(0)
    checked = 0
    for n in range(1, 11):
        for c in range(n + 1):
            verdicts = [True] * c + [False] * (n - c)
            rng.shuffle(verdicts)  # where the correct samples sit must not matter
            for k in range(1, n + 1):
                assert pass_at_k(n, c, k) == pytest.approx(brute_pass_at_k(verdicts, k), abs=1e-12), (n, c, k)
                checked += 1
    assert checked == sum(n * (n + 1) for n in range(1, 11))


def test_pass_at_k_edge_values_and_bad_input():
    assert pass_at_k(32, 0, 32) == 0.0
    assert pass_at_k(32, 1, 32) == 1.0
    assert pass_at_k(10, 3, 1) == pytest.approx(0.3)  # pass@1 is the plain accuracy c/n
    assert pass_at_k(5, 2, 4) == 1.0  # fewer wrong samples than k: every 4-subset has a right one
    product_form = 1 - _ratio(193, 200, 50)  # n too large to enumerate: Chen et al.'s product form
    assert pass_at_k(200, 7, 50) == pytest.approx(product_form, rel=1e-12) and 0 < product_form < 1
    for n, c, k in ((4, 5, 1), (4, -1, 1), (4, 2, 0), (4, 2, 5)):
        with pytest.raises(ValueError):
            pass_at_k(n, c, k)
    with pytest.raises(TypeError):
        pass_at_k(4.0, 2, 1)


def _ratio(a: int, b: int, k: int) -> float:
    """C(a, k) / C(b, k) as a product (the numerically stable form of Chen et al.'s code)."""
    out = 1.0
    for i in range(k):
        out *= (a - i) / (b - i)
    return out


# Two benchmarks of different sizes, two runs each. Benchmark A (2 questions) is easy, B (4) hard,
# so weighting benchmarks equally (per-benchmark) and questions equally (per-question) differ.
FIXTURE = {
    "A": {"q1": [1, 1], "q2": [0, 1]},
    "B": {"q1": [0, 0], "q2": [0, 0], "q3": [1, 0], "q4": [0, 0]},
}


def test_per_benchmark_and_per_question_averages_by_hand():
    s = summarize(FIXTURE, ks=[1, 2])
    a, b = s["benchmarks"]["A"], s["benchmarks"]["B"]
    # run 0: A 1/2, B 1/4; run 1: A 2/2, B 0/4
    assert a["accuracy"]["runs"] == [0.5, 1.0] and a["accuracy"]["mean"] == 0.75
    assert b["accuracy"]["runs"] == [0.25, 0.0] and b["accuracy"]["mean"] == 0.125
    assert a["accuracy"]["std"] == pytest.approx(0.25) and b["accuracy"]["std"] == pytest.approx(0.125)
    assert (a["accuracy"]["min"], a["accuracy"]["max"]) == (0.5, 1.0)
    per_bench = s["per_benchmark_average"]["accuracy"]
    assert per_bench["runs"] == [0.375, 0.5]  # (1/2 + 1/4) / 2, (1 + 0) / 2
    assert per_bench["mean"] == pytest.approx(0.4375) and per_bench["std"] == pytest.approx(0.0625)
    per_q = s["per_question_average"]["accuracy"]
    assert per_q["runs"] == pytest.approx([2 / 6, 2 / 6])  # all 6 questions pooled, 2 right in each run
    assert per_q["mean"] == pytest.approx(1 / 3) and per_q["std"] == pytest.approx(0.0)
    assert s["per_question_average"]["questions"] == 6 and s["per_benchmark_average"]["benchmarks"] == 2
    # pass@k over the 2 samples per question: A q1 (c=2) 1, 1; A q2 (c=1) 1/2, 1; B q3 (c=1) 1/2, 1
    assert a["pass_at_k"] == {"1": 0.75, "2": 1.0}
    assert b["pass_at_k"] == {"1": 0.125, "2": 0.25}
    assert s["per_benchmark_average"]["pass_at_k"] == {"1": 0.4375, "2": 0.625}
    assert s["per_question_average"]["pass_at_k"] == pytest.approx({"1": 2 / 6, "2": 3 / 6})


def test_spread_and_summarize_reject_bad_input():
    assert spread([0.5]) == {"mean": 0.5, "std": 0.0, "min": 0.5, "max": 0.5, "runs": [0.5]}
    with pytest.raises(ValueError, match="B question 'q2' has 1 verdicts, expected 2"):
        summarize({"A": {"q1": [1, 0]}, "B": {"q1": [0, 1], "q2": [1]}})
    with pytest.raises(ValueError, match="pass@k needs 1 <= k <= 2"):
        summarize(FIXTURE, ks=[4])
    with pytest.raises(ValueError, match="benchmark 'C' has no questions"):
        summarize({"C": {}})
