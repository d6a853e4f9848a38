"""TA-GRPO: the variant each rollout answers, joint (eq. 3) and per-variant (TA-GRPO*) normalization
through verl's own GRPO estimator against a direct computation, the step diagnostics, and the
config checks (anchoring in the agent loop: tests/test_agent_loop.py)."""

import numpy as np
import pytest
import torch

from recipes.methods import ta_grpo
from recipes.methods.ta_grpo import TAGRPOError, TASettings
from recipes.settings import ConfigError, load


# ---------------------------------------------------------------------------- settings
def test_session_k_answers_variant_k_div_g():
    ta = TASettings(n_rephrasings=3)
    assert [ta.variant(k, 32) for k in range(32)] == [k // 8 for k in range(32)]
    assert [ta.variant(k, 8) for k in range(8)] == [0, 0, 1, 1, 2, 2, 3, 3]
    assert ta.group_of(32) == 8
    with pytest.raises(ConfigError, match="rollout.n=30 must be .N\\+1. x G"):
        ta.variant(0, 30)


@pytest.mark.parametrize(
    "settings, match",
    [
        ({"n_rephrasings": "3"}, "n_rephrasings='3' must be an integer"),
        ({"n_rephrasings": 0}, "n_rephrasings=0 must be >= 1"),
        ({"n_rephrasings": 3, "anchor": "q0"}, "anchor='q0'"),
        ({"n_rephrasings": 3, "groups": "joint"}, "groups='joint'"),
        ({"n_rephrasings": 3, "ancor": "own"}, "unknown settings"),
    ],
)
def test_bad_settings_fail_clearly(settings, match):
    with pytest.raises(ConfigError, match=match):
        load(TASettings, settings, "recipes.ta_grpo")


def test_variant_question_and_swap():
    row = {"index": 3, "data_source": "math", "rephrasings": np.array(["Compute 2+2.", "2+2 equals?"])}
    assert ta_grpo.variant_question(row, 0, "What is 2+2?") == "What is 2+2?"
    assert ta_grpo.variant_question(row, 2, "What is 2+2?") == "2+2 equals?"
    with pytest.raises(TAGRPOError, match="row 3 of data source 'math' has 2 rephrasings"):
        ta_grpo.variant_question(row, 3, "What is 2+2?")
    from recipes.extensions.agent_loop import PromptError, swap_question

    messages = [
        {"role": "system", "content": "Be brief."},
        {"role": "user", "content": "What is 2+2?\nBox it."},
    ]
    swapped = swap_question(messages, "What is 2+2?", "Compute 2+2.")
    assert swapped == [messages[0], {"role": "user", "content": "Compute 2+2.\nBox it."}]
    assert messages[1]["content"] == "What is 2+2?\nBox it."  # the input is not modified
    with pytest.raises(PromptError, match="does not contain extra_info.question"):
        swap_question(messages, "What is 3+3?", "x")


@pytest.mark.parametrize("anchor", ["original", "own"])
def test_the_prompt_hook_shows_each_sessions_variant_and_anchors_it(anchor):
    """Session k of rollout.n = (N+1) x G answers variant k // G; anchored, a variant's response is
    trained under q0 and the rollout's log-probs (under q_v) are dropped; validation shows q0."""
    from recipes.methods.base import Prompt

    hook = ta_grpo.TAPrompts(TASettings(n_rephrasings=2, anchor=anchor))
    row = {"index": 3, "data_source": "math", "rephrasings": ["Compute 2+2.", "2+2 equals?"]}
    seen = []
    for session in range(6):  # G = 2
        p = Prompt("What is 2+2?", "What is 2+2?")
        hook(p, {**row, "session_id": session}, True, 6)
        seen.append((p.question, p.extra["variant"], p.trained_under, p.rollout_log_probs))
    anchored = anchor == "original"
    q0 = "What is 2+2?" if anchored else None
    assert seen == [
        ("What is 2+2?", 0, None, not anchored),
        ("What is 2+2?", 0, None, not anchored),
        ("Compute 2+2.", 1, q0, not anchored),
        ("Compute 2+2.", 1, q0, not anchored),
        ("2+2 equals?", 2, q0, not anchored),
        ("2+2 equals?", 2, q0, not anchored),
    ]
    val = Prompt("What is 2+2?", "What is 2+2?")
    hook(val, {**row, "session_id": 5}, False, 6)
    assert val == Prompt("What is 2+2?", "What is 2+2?")


@pytest.mark.parametrize("anchor", ["original", "own"])
def test_a_pad_slot_shows_their_pad_prompt_and_stays_in_the_group_under_q0(anchor):
    """The authors' pad rows (empty question) as our PAD slots: the session shows their pad row's
    prompt, the instruction alone (utils.py: instruction + "\\n" + ""); anchored, its response is
    still trained under q0's prompt, as every other variant's."""
    from recipes.extensions.agent_loop import swap_question
    from recipes.methods.base import Prompt
    from recipes.tools.data.ta_authors import INSTRUCTION, authors_prompt

    q0 = "What is 2+2?"
    row = {"index": 3, "data_source": "ta_math_a9u", "rephrasings": ["Compute 2+2.", ta_grpo.PAD]}
    assert ta_grpo.variant_question(row, 2, q0) == ""
    hook = ta_grpo.TAPrompts(TASettings(n_rephrasings=2, anchor=anchor))
    p = Prompt(q0, q0)
    hook(p, {**row, "session_id": 5}, True, 6)  # G = 2: session 5 answers variant 2, the pad
    assert (p.extra["variant"], p.question) == (2, "")
    assert swap_question(authors_prompt(q0), q0, p.question) == [
        {"role": "user", "content": INSTRUCTION + "\n"}
    ]
    assert p.trained_under == (q0 if anchor == "original" else None)


def test_a_file_of_the_authors_set_is_read_with_all_its_variants(tmp_path):
    """`prepare ta_math_a9u` records the file's variants per question; a run whose N+1 differs is
    refused before Ray, naming the setting that fits the file (rollout.n follows it, (N+1) x G)."""
    from omegaconf import OmegaConf

    from recipes.tools.data import make_row, write_rows

    rows = [
        make_row(
            "What is 2+2?", "4", data_source="ta_math_a9u", split="train", index=0, rephrasings=["a"] * 7
        )
    ]
    f = write_rows(rows, tmp_path / "train.parquet", {"name": "ta_math_a9u", "variants_per_question": 8})
    cfg = OmegaConf.create({"actor_rollout_ref": {"rollout": {"n": 32}}})
    with pytest.raises(ConfigError) as err:
        ta_grpo.check_data(cfg, TASettings(n_rephrasings=3), [str(f)])
    assert "holds 8 variants per question" in str(err.value)
    assert "set recipes.ta_grpo.n_rephrasings=7 (actor_rollout_ref.rollout.n follows" in str(err.value)
    ta_grpo.check_data(cfg, TASettings(n_rephrasings=7), [str(f)])  # N+1 = 8: accepted


# ------------------------------------------------------------------------- normalization
def verl_grpo(rewards, uids):
    from verl.trainer.ppo.core_algos import compute_grpo_outcome_advantage

    r = torch.tensor(rewards, dtype=torch.float32)
    token_rewards = torch.zeros(len(r), 4)
    token_rewards[:, -1] = r  # outcome reward on the last token
    adv, _ = compute_grpo_outcome_advantage(
        token_rewards, torch.ones(len(r), 4), np.array(uids, dtype=object)
    )
    return adv[:, 0].numpy()


def test_pooled_uid_is_eq3_by_hand():
    # one question, N=1, G=2: q0's responses 1, 0; q1's 1, 1
    rewards, variants = [1.0, 0.0, 1.0, 1.0], [0, 0, 1, 1]
    # eq. 3 over all four: mean 0.75, std 0.5 (verl's torch.std, Bessel-corrected)
    assert verl_grpo(rewards, ["q"] * 4) == pytest.approx([0.5, -1.5, 0.5, 0.5], abs=1e-5)
    # TA-GRPO*: q0 alone: mean 0.5, std sqrt(0.5); q1 alone: all equal, advantage 0
    split = [f"q:v{v}" for v in variants]
    assert verl_grpo(rewards, split) == pytest.approx([0.5**0.5, -(0.5**0.5), 0.0, 0.0], abs=1e-5)


@pytest.mark.parametrize("seed", range(5))
def test_pooled_and_per_variant_groups_match_a_direct_computation(seed):
    rng = np.random.default_rng(seed)
    n_questions, n_variants, g = 6, 4, 8
    rewards = rng.integers(0, 2, size=(n_questions, n_variants, g)).astype(float)
    rewards += rng.choice([0.0, 0.25, 1.0], size=rewards.shape)  # format scores
    uids = [f"u{q}" for q in range(n_questions) for _ in range(n_variants * g)]
    variants = [v for _ in range(n_questions) for v in range(n_variants) for _ in range(g)]
    flat = rewards.reshape(-1).tolist()

    pooled = verl_grpo(flat, uids)
    split = verl_grpo(flat, [f"{u}:v{v}" for u, v in zip(uids, variants, strict=True)])
    for q in range(n_questions):
        block = rewards[q].reshape(-1)
        expect = (block - block.mean()) / (block.std(ddof=1) + 1e-6)  # eq. 3
        got = pooled[q * n_variants * g : (q + 1) * n_variants * g]
        assert got == pytest.approx(expect, abs=1e-4)
        for v in range(n_variants):
            r = rewards[q, v]
            expect = (r - r.mean()) / (r.std(ddof=1) + 1e-6)
            start = (q * n_variants + v) * g
            assert split[start : start + g] == pytest.approx(expect, abs=1e-4)


# ------------------------------------------------------------------------------- diagnostics
def test_diagnostics_by_hand():
    groups = ["a"] * 4 + ["b"] * 4
    variants = [0, 0, 1, 1] * 2
    scores = [1, 1, 0, 1, 0, 0, 0, 0]  # a: q0 uniform, pooled mixed; b: uniform everywhere
    out = ta_grpo.diagnostics(groups, variants, scores, scores, n_variants=2)
    assert out == {
        "ta_grpo/original_uniform_frac": 1.0,
        "ta_grpo/pooled_uniform_frac": 0.5,
        "ta_grpo/group_reward_std": pytest.approx((np.std([1, 1, 0, 1]) + 0.0) / 2),
        "ta_grpo/variant_0/acc": 0.5,
        "ta_grpo/variant_1/acc": 0.25,
    }


def test_the_grouping_hook_pools_or_splits_by_variant():
    """The trainer's grouping step: pooled (eq. 3) keeps the row's group; TA-GRPO* splits it by
    variant (padding samples included: they have no variant, so they count as variant 0)."""
    from recipes.methods.base import Samples

    samples = Samples(
        keep=[0, 1, 2],
        extra=[{"variant": 0}, {"variant": 1}, {"variant": 1}, {}],
        infos=[],
        lengths=[],
        fields={},
    )
    groups = ["a", "a", "b", "b"]
    pooled = ta_grpo.TAHooks(TASettings(groups="pooled"))
    star = ta_grpo.TAHooks(TASettings(anchor="own", groups="per_variant"))
    assert pooled.advantage_groups(None, groups, samples) == groups
    assert star.advantage_groups(None, groups, samples) == ["a:v0", "a:v1", "b:v1", "b:v0"]
