"""The TA-GRPO presets against the authors' public code (lhkhiem28/TA-GRPO@09719bf:
run_grpo-Qwen3-1.7B-MATH-A9-U.sh, run_grpo-Qwen3-1.7B-MATH.sh, utils.py, their
verl/trainer/ppo/ray_trainer.py), and the mapping of their published rows to ours
(recipes/tools/data/ta_authors.py; docs/data.md#the-ta-grpo-authors-sets)."""

import json
from pathlib import Path

import pytest

from recipes.methods.ta_grpo import PAD
from recipes.plan import training_steps
from recipes.tools.data import read_meta, validate_parquet
from recipes.tools.data import ta_authors as ta
from recipes.train import compose

FIXTURE = Path(__file__).resolve().parent / "fixtures" / "ta_grpo_authors_schema"
PRESETS = (
    "ta_grpo_math",
    "ta_grpo_math_256q",
    "ta_grpo_star_math",
    "ta_grpo_baseline_grpo_math",
    "ta_grpo_baseline_grpo_ds_math",
)
# their script: 256 rows a step, n 8, mini-batch 128 rows, 2 epochs, test and save at step 406
THEIR_ROWS, THEIR_N, THEIR_MINI, THEIR_EPOCHS, THEIR_LAST_STEP = 256, 8, 128, 2, 406
THEIR_INSTRUCTION = (  # utils.py make_map_fn, character for character
    "You FIRST think about the reasoning process step by step and then provide the user with the answer. "
    "Please enclose your final answer in the box: \\boxed{}. Please stop generating immediately after "
    "outputting the box."
)


@pytest.fixture(scope="module")
def cfgs():
    return {name: compose([f"experiment={name}"]) for name in PRESETS}


def _jsonl(name: str) -> list[dict]:
    return [json.loads(line) for line in (FIXTURE / name).read_text().splitlines()]


def _their_rows(questions: int, variants: int = 8, pads: int = 3) -> list[dict]:
    """Rows in their schema: `questions` blocks of `variants` rows, the last `pads` of every other
    block empty (pad rows)."""
    return [
        {
            "question": ""
            if q % 2 and s >= variants - pads
            else f"Question {q}, variant {s}: what is {q} + {s}?",
            "answer": str(q),
            "index": q,
            "sub_index": s,
        }
        for q in range(questions)
        for s in range(variants)
    ]


# ---------------------------------------------------------------------------- the batch and steps
def test_a_step_is_their_256_rows_and_a_mini_batch_their_128(cfgs):
    """2,048 responses a step and 1,024 a mini-batch, read as their rows: one row here is a question
    with its 8 variants (their 8 rows of one `index`), each answered G=8 times."""
    cfg = cfgs["ta_grpo_math"]
    actor, rollout = cfg.actor_rollout_ref.actor, cfg.actor_rollout_ref.rollout
    n_rephrasings = cfg.recipes.ta_grpo.n_rephrasings
    variants, g = n_rephrasings + 1, rollout.n // (n_rephrasings + 1)
    assert (variants, g) == (ta.PRESET_VARIANTS, THEIR_N) == (8, 8)
    assert cfg.data.train_batch_size * rollout.n == THEIR_ROWS * THEIR_N == 2048
    assert actor.ppo_mini_batch_size * rollout.n == THEIR_MINI * THEIR_N == 1024
    assert cfg.data.train_batch_size * variants == THEIR_ROWS  # 32 questions = their 256 rows
    assert actor.ppo_mini_batch_size * variants == THEIR_MINI
    assert cfg.data.shuffle is False  # their data.shuffle=False: the file's order
    assert cfg.trainer.total_epochs == THEIR_EPOCHS and cfg.trainer.total_training_steps is None


@pytest.mark.parametrize("questions", [6496, 6511, 6512, 6495])
def test_the_step_count_is_theirs_on_the_same_file(cfgs, questions):
    """The same rows in their form and in ours give the same steps: theirs 2 x floor(rows / 256), ours
    2 x floor(questions / 32). Their 406 is 51,968 to 52,095 rows; 6,496 questions of 8 rows give it."""
    cfg = cfgs["ta_grpo_math"]
    raw = _their_rows(questions)
    rows, counts = ta.group_questions(raw, "train", "ta_math_a9u")
    assert counts["questions"] == len(rows) == questions and counts["variants_per_question"] == 8
    theirs = THEIR_EPOCHS * (len(raw) // THEIR_ROWS)
    ours = training_steps(cfg, len(rows))
    assert ours == theirs
    if questions in (6496, 6511):
        assert ours == THEIR_LAST_STEP == cfg.trainer.save_freq == cfg.trainer.test_freq


# ---------------------------------------------------------------------------- the rest of their script
def test_loss_kl_schedule_lengths_and_reward_are_their_scripts(cfgs):
    cfg = cfgs["ta_grpo_math"]
    actor, rollout = cfg.actor_rollout_ref.actor, cfg.actor_rollout_ref.rollout
    assert actor.loss_agg_mode == "token-mean"  # their fork's default (the script sets none)
    assert (actor.use_kl_loss, actor.kl_loss_type, actor.kl_loss_coef) == (True, "low_var_kl", 0.001)
    assert not cfg.algorithm.use_kl_in_reward and actor.entropy_coeff == 0
    assert (actor.clip_ratio_low, actor.clip_ratio_high, actor.clip_ratio_c) == (0.2, 0.2, 3.0)
    assert (actor.optim.lr, actor.optim.lr_warmup_steps_ratio, actor.optim.lr_scheduler_type) == (
        1e-6,
        0.1,
        "cosine",
    )
    assert (actor.optim.min_lr_ratio, actor.optim.num_cycles) == (0.0, 0.5)  # verl's cosine, to 0
    assert (rollout.temperature, rollout.top_p) == (1.0, 1)
    assert (cfg.data.max_prompt_length, cfg.data.max_response_length) == (512, 3072)
    assert cfg.data.filter_overlong_prompts is True and cfg.data.truncation == "error"
    # accuracy from the last \boxed{} only (their math_reward.py), no format reward
    assert cfg.reward.custom_reward_function.reward_kwargs.mode == "boxed"


def test_chat_template_left_at_its_default_and_validation_greedy(cfgs):
    """Their script passes no chat-template argument: Qwen3's template thinks by default."""
    for name in PRESETS:
        assert dict(cfgs[name].data.apply_chat_template_kwargs) == {}, name
    val = cfgs["ta_grpo_math"].actor_rollout_ref.rollout.val_kwargs
    assert (val.temperature, val.do_sample, val.n) == (0, False, 1)  # their fork's val_kwargs


def test_every_ta_preset_names_the_ta_grpo_protocol(cfgs):
    assert {name: cfgs[name].recipes.eval_protocol for name in PRESETS} == dict.fromkeys(PRESETS, "ta_grpo")


def test_presets_read_the_authors_sets_and_the_baselines_their_math_script(cfgs):
    for name in ("ta_grpo_math", "ta_grpo_math_256q", "ta_grpo_star_math"):
        assert cfgs[name].recipes.data == "ta_math_a9u", name
        assert cfgs[name].data.train_files.endswith("/data/ta_math_a9u/train.parquet")
        assert cfgs[name].recipes.ta_grpo.n_rephrasings == 7
    star = cfgs["ta_grpo_star_math"].recipes.ta_grpo
    assert (star.anchor, star.groups) == ("own", "per_variant")
    assert cfgs["ta_grpo_math"].recipes.ta_grpo.anchor == "original"  # ratios under q0 (eq. 4)
    paper = cfgs["ta_grpo_math_256q"]
    assert paper.data.train_batch_size * paper.actor_rollout_ref.rollout.n == 256 * 64
    assert paper.actor_rollout_ref.actor.optim.lr_scheduler_type == "constant"
    # run_grpo-Qwen3-1.7B-MATH.sh: their MATH set, 256 x 8, mini-batch 128, shuffled, step 56
    for name in ("ta_grpo_baseline_grpo_math", "ta_grpo_baseline_grpo_ds_math"):
        b = cfgs[name]
        assert b.recipes.data == "ta_math" and "ta_grpo" not in b.recipes.methods, name
        assert (b.data.train_batch_size, b.actor_rollout_ref.rollout.n) == (256, 8)
        assert b.actor_rollout_ref.actor.ppo_mini_batch_size == 128 and b.data.shuffle is True
        assert (b.trainer.save_freq, b.trainer.test_freq) == (56, 56)
        assert b.actor_rollout_ref.actor.loss_agg_mode == "token-mean"
    assert cfgs["ta_grpo_baseline_grpo_ds_math"].algorithm.filter_groups.enable


# ---------------------------------------------------------------------------- their rows to ours
def test_mapper_on_a_fixture_in_their_schema_not_real_rows():
    """tests/fixtures/ta_grpo_authors_schema: hand-made rows in the schema their utils.py reads
    (README there: no public copy of the real rows could be reached)."""
    train, test, counts = ta.build("ta_math_a9u", _jsonl("train.jsonl"), _jsonl("test.jsonl"))
    assert [r["extra_info"]["index"] for r in train] == [0, 1, 2]
    assert counts["train_rows"] == 24 and counts["train_pad_rows"] == 6 and counts["train_padded_here"] == 0
    assert counts["train_variants_per_question"] == 8 and counts["test_questions"] == 2
    coins = train[1]  # its rows come out of sub_index order in the file
    assert coins["extra_info"]["question"].startswith("Two fair coins are tossed.")
    assert coins["rephrasings"][0].startswith("Toss two fair coins.")
    assert coins["rephrasings"][3:] == [PAD] * 4 and coins["reward_model"]["ground_truth"] == "\\frac{1}{4}"
    # their prompt: the instruction, a newline, the question, as the one user message
    q0 = coins["extra_info"]["question"]
    assert coins["prompt"] == [{"role": "user", "content": THEIR_INSTRUCTION + "\n" + q0}]
    assert ta.INSTRUCTION == THEIR_INSTRUCTION
    assert all(len(r["rephrasings"]) == 7 for r in train) and all(r["rephrasings"] == [] for r in test)
    assert {r["data_source"] for r in train + test} == {"ta_math_a9u"}


def test_pads_alone_are_dropped_short_questions_padded_and_plain_rows_kept():
    raw = [
        {"question": "What is 1 + 1?", "answer": "2", "index": 5, "sub_index": 0},
        {"question": "Compute 1 + 1.", "answer": "2", "index": 5, "sub_index": 1},
        {"question": "", "answer": "", "index": 6, "sub_index": 0},  # a pad with no question
        {"question": "What is 2 + 2?", "answer": "4", "index": 7, "sub_index": 0},
        {"question": "", "answer": "4", "index": 7, "sub_index": 1},
        {"question": "", "answer": "4", "index": 7, "sub_index": 2},
        {"question": "What is 3 + 3?", "answer": "nan", "index": 8, "sub_index": 0},  # unusable answer
    ]
    rows, counts = ta.group_questions(raw, "train", "ta_math_a9u")
    assert [r["rephrasings"] for r in rows] == [["Compute 1 + 1.", PAD], [PAD, PAD]]
    assert (counts["pads_alone"], counts["padded_here"], counts["unusable"]) == (1, 1, 1)
    # their MATH config has no sub_index: every row is its own question, indexed by row number
    plain, counts = ta.group_questions(
        [{"question": "What is 9 - 4?", "answer": "5"}, {"question": "What is 3 * 3?", "answer": "9"}],
        "train",
        "ta_math",
    )
    assert [r["extra_info"]["index"] for r in plain] == [0, 1] and counts["variants_per_question"] == 1
    assert plain[1]["prompt"][0]["content"] == THEIR_INSTRUCTION + "\nWhat is 3 * 3?"


def test_prepare_writes_files_the_preset_trains_on(tmp_path, monkeypatch, capsys, cfgs):
    """`prepare ta_math_a9u` end to end, the hub download faked at its seam (Source.load: no hub
    here) with the fixture's rows; the written file passes the schema and TA-GRPO's data check
    under the preset's settings."""
    from recipes.methods import ta_grpo
    from recipes.settings import load
    from recipes.tools.data import sources

    splits = {"train": _jsonl("train.jsonl"), "test": _jsonl("test.jsonl")}
    asked = []

    def fake_hub_load(self):
        asked.append((self.hf_id, self.configs, self.split))
        return splits[self.split]

    monkeypatch.setattr(sources.Source, "load", fake_hub_load)
    train, test = ta.prepare("ta_math_a9u", tmp_path / "ta_math_a9u")
    assert asked == [("lhkhiem28/TA-GRPO-datasets", ("MATH-A9-U",), s) for s in ("train", "test")]
    assert validate_parquet(train) == 3 and validate_parquet(test) == 2
    meta = read_meta(train)
    assert meta["variants_per_question"] == 8 and meta["config"] == "MATH-A9-U"
    assert "train_variants_per_question=8" in capsys.readouterr().err
    cfg = cfgs["ta_grpo_math"]
    settings = load(ta_grpo.TASettings, dict(cfg.recipes.ta_grpo), "recipes.ta_grpo")
    ta_grpo.check_data(cfg, settings, [str(train)])  # the preset's N+1 = the file's 8: accepted


def test_the_data_tools_pad_slot_is_the_one_the_method_reads():
    assert ta.PAD == PAD
