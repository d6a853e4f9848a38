"""The training reward (rewards/training.py) from its parts: a format rule (prompt_aug/templates.py),
DAPO's overlong penalty and the grader's statuses; hand-computed values."""

import pytest

from prompt_aug.templates import FormatRule
from recipes.reward_settings import RewardSettings, settings
from recipes.settings import ConfigError
from rewards.training import overlong_penalty, training_reward

TAGS = FormatRule((("<think>", 0.25), ("</think>", 0.25), ("<answer>", 0.25), ("</answer>", 0.25)))


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
    assert TAGS.score(response) == pytest.approx(expected)


def test_rule_without_checks_always_earns_one():
    assert FormatRule().score("anything") == 1.0


def test_rule_validation():
    with pytest.raises(ValueError, match="sum to"):
        FormatRule((("a", 0.7), ("b", 0.7)))
    with pytest.raises(ValueError, match="non-empty substring"):
        FormatRule((("", 1.0),))


def test_training_reward_is_acc_plus_weighted_format_plus_penalty():
    grade = {"score": 1.0, "acc": 1.0, "pred": "4", "status": "ok"}
    r = training_reward(grade, 0.75, -0.25, 0.5)
    assert r["score"] == pytest.approx(1.0 + 0.5 * 0.75 - 0.25)
    assert (r["acc"], r["format_score"], r["overlong_penalty"], r["pred"]) == (1.0, 0.75, -0.25, "4")
    assert training_reward({**grade, "acc": 0.0}, 1.0, 0.0, 0.0)["score"] == 0.0  # no-format ablation
    assert grade["score"] == 1.0  # the grader's result is not modified


@pytest.mark.parametrize(
    "length,expected",
    [(10, 0.0), (48, 0.0), (52, -0.125), (56, -0.25), (64, -0.5)],  # max 64, buffer 16, factor 0.5
)
def test_overlong_penalty_is_dapo_eq_13(length, expected):
    assert overlong_penalty(length, 64, 16, 0.5) == pytest.approx(expected)
    assert overlong_penalty(length, 64, 0, 0.5) == 0.0  # off


def _cfg(response_length=64, **kwargs):
    from omegaconf import OmegaConf

    return OmegaConf.create(
        {
            "actor_rollout_ref": {"rollout": {"response_length": response_length}},
            "reward": {"custom_reward_function": {"reward_kwargs": kwargs}},
        }
    )


def test_settings_are_checked_with_the_key_named():
    assert settings(_cfg(format_weight=0)) == RewardSettings(format_weight=0.0)
    with pytest.raises(ConfigError, match=r"reward_kwargs: unknown settings \['timeout'\]"):
        settings(_cfg(timeout=3))
    with pytest.raises(ConfigError, match="reward_kwargs.mode='strict' must be one of 'lenient', 'boxed'"):
        settings(_cfg(mode="strict"))
    with pytest.raises(ConfigError, match="overlong_buffer_len=64 must be in"):
        settings(_cfg(overlong_buffer_len=64))


def test_statuses(grader):
    overlong = "\\boxed{1} \\boxed{" + "0+" * 2100 + "1}"  # the last box is past MAX_BOXED_CHARS
    responses = ["\\boxed{1}", "\\boxed{2}", "no answer here", "\\boxed{9^{9^{9^9}}}", "\\boxed{1}", overlong]
    golds = ["1", "1", "1", "3", "", "1"]
    results = grader.grade_batch(responses, golds, mode="boxed")
    assert [r["status"] for r in results] == [
        "ok",
        "ok",
        "no_answer",
        "timeout",
        "bad_ground_truth",
        "box_too_long",
    ]
    assert [r["acc"] for r in results] == [1.0, 0.0, 0.0, 0.0, 0.0, 0.0]
    assert [r["score"] for r in results] == [r["acc"] for r in results]
    assert [r["timed_out"] for r in results] == [False, False, False, True, False, False]


def test_batch_length_mismatch_is_an_error(grader):
    with pytest.raises(ValueError, match="2 solutions but 1 ground truths"):
        grader.grade_batch(["a", "b"], ["1"])
