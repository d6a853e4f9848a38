"""The format-reward seam (rule defined here, as prompt augmentation will define its 13) and the
counters a training run logs."""

import pytest

from rewards.format import FORMAT_RULES, FormatRule, format_score_for, register_format_rule

TAGS = (("<think>", 0.25), ("</think>", 0.25), ("<answer>", 0.25), ("</answer>", 0.25))


@pytest.fixture(autouse=True)
def _rules():
    register_format_rule("test-tags", TAGS)
    register_format_rule("test-free", [])
    yield
    FORMAT_RULES.pop("test-tags", None)
    FORMAT_RULES.pop("test-free", None)


@pytest.mark.parametrize(
    "response,expected",
    [
        ("<think>r</think><answer>\\boxed{1}</answer>", 1.0),  # every part once
        ("<think>r</think>\\boxed{1}", 0.5),  # answer tags missing
        ("r</think><answer>\\boxed{1}</answer>", 0.75),  # one part missing
        ("<think>a</think><think>b</think><answer>1</answer>", 0.5),  # think tags repeated: no credit
        ("", 0.0),
    ],
)
def test_format_rule_scores_each_part_once(response, expected):
    assert format_score_for({"template": "test-tags"}, response) == pytest.approx(expected)


def test_rule_without_checks_always_earns_one():
    assert format_score_for({"template": "test-free"}, "anything") == 1.0


def test_no_template_no_format_score():
    assert format_score_for(None, "x") is None
    assert format_score_for({}, "x") is None
    assert format_score_for({"template": None}, "x") is None


def test_unknown_template_is_a_clear_error():
    with pytest.raises(KeyError, match="'nope'.*registered: .*test-tags"):
        format_score_for({"template": "nope"}, "x")


def test_rule_validation():
    with pytest.raises(ValueError, match="sum to"):
        FormatRule((("a", 0.7), ("b", 0.7)))
    with pytest.raises(ValueError, match="non-empty substring"):
        FormatRule((("", 1.0),))
    with pytest.raises(ValueError, match="different format rule"):
        register_format_rule("test-tags", [("x", 1.0)])


def test_compute_score_adds_weighted_format_score(grader):
    good = "<think>2+2</think><answer>\\boxed{4}</answer>"
    r = grader.grade(good, "4", extra_info={"template": "test-tags"})
    assert (r["acc"], r["format_score"], r["score"]) == (1.0, 1.0, 2.0)
    r = grader.grade(good, "5", extra_info={"template": "test-tags"}, format_weight=0.5)
    assert (r["acc"], r["format_score"], r["score"]) == (0.0, 1.0, 0.5)
    r = grader.grade(good, "4", extra_info={"template": "test-tags"}, format_weight=0.0)
    assert r["score"] == 1.0  # the no-format ablation
    r = grader.grade("<think>x</think>\\boxed{4}", "4", extra_info={"template": "test-tags"})
    assert r["score"] == pytest.approx(1.5)
    r = grader.grade(good, "4", extra_info={"other": 1})
    assert (r["format_score"], r["score"]) == (0.0, 1.0)


def test_statuses(grader):
    responses = ["\\boxed{1}", "\\boxed{2}", "no answer here", "\\boxed{9^{9^{9^9}}}", "\\boxed{1}"]
    golds = ["1", "1", "1", "3", ""]
    results = grader.grade_batch(responses, golds, mode="boxed")
    assert [r["status"] for r in results] == ["ok", "ok", "no_answer", "timeout", "bad_ground_truth"]
    assert [r["acc"] for r in results] == [1.0, 0.0, 0.0, 0.0, 0.0]
    assert [r["timed_out"] for r in results] == [False, False, False, True, False]


def test_batch_length_mismatch_is_an_error(grader):
    with pytest.raises(ValueError, match="2 solutions but 1 ground truths"):
        grader.grade_batch(["a", "b"], ["1"])
