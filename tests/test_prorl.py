"""ProRL (recipes/methods/prorl.py): the reset triggers step by step, the validation triggers against
sampling noise (simulated validations of the preset), the worker's reset on verl's real FSDP2
engines in a fresh interpreter, and the trainer's refusal to resume without a snapshot.
The end-to-end run through verl's trainer (KL back to 0 after each reset, resume with the same
reference) is in tests/test_train_e2e.py."""

import dataclasses
import json
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import datasets
import numpy as np
import pytest
from omegaconf import OmegaConf

from recipes.methods.prorl import ProRLHooks, ProRLSettings, check
from recipes.methods.prorl_triggers import (
    ControllerState,
    ProRLError,
    ResetController,
    noise_bound,
    validation_samples,
)
from recipes.settings import ConfigError, load

REPO = Path(__file__).resolve().parent.parent


def run_steps(ctl: ResetController, kls: list[float], start: int = 1) -> list[tuple[int, str]]:
    """Feed one KL per step; reset whenever a trigger fires (as the trainer does)."""
    fired = []
    for step, kl in enumerate(kls, start=start):
        trigger = ctl.after_step(step, {"actor/kl_loss": kl})
        if trigger:
            ctl.record_reset(step, trigger)
            fired.append((step, trigger))
    return fired


# ---------------------------------------------------------------------------------- triggers
def test_interval_counts_from_the_last_reset():
    ctl = ResetController(ProRLSettings(reset_every=3))
    assert run_steps(ctl, [0.1] * 10) == [(3, "interval"), (6, "interval"), (9, "interval")]
    assert ctl.state.resets == 3 and ctl.state.last_reset_step == 9
    assert [h["step"] for h in ctl.state.history] == [3, 6, 9]


def test_interval_restarts_after_a_kl_spike_reset():
    ctl = ResetController(ProRLSettings(reset_every=4, kl_threshold=1.0, kl_patience=1))
    kls = [0.1, 2.0, 0.1, 0.1, 0.1, 0.1, 0.1]  # spike at step 2; the interval then counts from 2
    assert run_steps(ctl, kls) == [(2, "kl_spike"), (6, "interval")]


def test_kl_spike_needs_patience_consecutive_steps():
    ctl = ResetController(ProRLSettings(kl_threshold=0.5, kl_patience=3))
    # two high steps, one low (streak broken), then three high: fires on the third of those
    assert run_steps(ctl, [0.9, 0.9, 0.1, 0.9, 0.9, 0.9, 0.9]) == [(6, "kl_spike")]
    assert ctl.state.kl_streak == 1  # the reset restarted the streak; step 7 is high again
    assert ctl.state.history[0]["kl"] == 0.9


def test_kl_exactly_at_the_threshold_does_not_fire():
    ctl = ResetController(ProRLSettings(kl_threshold=0.5, kl_patience=1))
    assert run_steps(ctl, [0.5, 0.5, 0.49]) == []


def test_nothing_fires_when_no_trigger_is_set():
    ctl = ResetController(ProRLSettings())
    assert run_steps(ctl, [100.0] * 20) == []
    ctl.after_validation(20, {"val": 0.1})  # not watched: no error, no pending
    assert ctl.state.pending is None


def test_min_gap_drops_early_triggers_and_counts_them():
    ctl = ResetController(ProRLSettings(kl_threshold=0.5, kl_patience=1, min_gap=3))
    # first spike fires (no earlier reset), the next two are within 3 steps, then allowed again
    assert run_steps(ctl, [0.9, 0.9, 0.9, 0.9, 0.1]) == [(1, "kl_spike"), (4, "kl_spike")]
    assert ctl.state.suppressed == 2


def validate(ctl: ResetController, step: int, value: float) -> str | None:
    ctl.after_validation(step, {"val/acc": value})
    trigger = ctl.take_pending(step + 1)
    if trigger:
        ctl.record_reset(step, trigger)
    return trigger


# the raw rules (val_confidence null): any drop beyond val_decline, any P validations without a new best
def test_validation_decline_below_the_best():
    ctl = ResetController(ProRLSettings(val_metric="val/acc", val_decline=0.05, val_confidence=None))
    # best 0.50 at step 20; 0.46 is within 0.05; 0.44 is more than 0.05 below
    assert [validate(ctl, s, v) for s, v in [(10, 0.40), (20, 0.50), (30, 0.46), (40, 0.44)]] == [
        None,
        None,
        None,
        "val_decline",
    ]
    # a reset starts a new phase: the next validation is the new best, even if lower
    assert ctl.state.best_val is None
    assert validate(ctl, 50, 0.30) is None and ctl.state.best_val == 0.30


def test_validation_plateau_after_p_validations_without_a_new_best():
    ctl = ResetController(ProRLSettings(val_metric="val/acc", val_plateau=2, val_confidence=None))
    values = [0.4, 0.5, 0.5, 0.45, 0.6, 0.55, 0.6]  # equal to the best is not a new best
    fired = [validate(ctl, 10 * (i + 1), v) for i, v in enumerate(values)]
    assert fired == [None, None, None, "val_plateau", None, None, "val_plateau"]


def test_validation_trigger_waits_for_the_next_step_and_respects_min_gap():
    ctl = ResetController(
        ProRLSettings(val_metric="val/acc", val_decline=0.0, min_gap=5, reset_every=0, val_confidence=None)
    )
    ctl.after_validation(4, {"val/acc": 0.5})
    ctl.record_reset(4, "interval")  # pretend a reset just happened at step 4
    ctl.after_validation(6, {"val/acc": 0.5})
    ctl.after_validation(7, {"val/acc": 0.1})
    assert ctl.state.pending == "val_decline"
    assert ctl.take_pending(8) is None  # step 7 is 3 steps after the reset at 4: dropped
    assert ctl.state.pending is None and ctl.state.suppressed == 1


# ------------------------------------------------------------------ validation noise
def test_noise_bound_by_hand():
    # 80% and 76% of 2,000 responses: pooled p = 0.78, SE = sqrt(2 * 0.78 * 0.22 / 2000) = 0.0130997
    assert noise_bound(0.80, 0.76, 2000, 0.99) == pytest.approx(2.326348 * 0.0130997, abs=1e-6)  # 0.030474
    # the best of 10 validations: z at 1 - 0.01 / 10 = 0.999, 3.090232
    assert noise_bound(0.80, 0.76, 2000, 0.99, 10) == pytest.approx(0.0404811, abs=1e-6)
    # 50% of 500, 95%: 1.644854 * sqrt(2 * 0.25 / 500) = 1.644854 * 0.0316228
    assert noise_bound(0.5, 0.5, 500, 0.95) == pytest.approx(0.0520148, abs=1e-6)
    assert noise_bound(0.0, 0.0, 500, 0.999) == 0.0  # a metric that never varies has no noise


def decide(samples: int, values: list[float], **kw) -> list[str | None]:
    ctl = ResetController(ProRLSettings(val_metric="acc", **kw))
    return [ctl.after_validation(20 * (i + 1), {"acc": v}, samples=samples) for i, v in enumerate(values)]


def test_decline_must_exceed_the_noise_of_the_samples_behind_it():
    kw = {"val_decline": 0.03, "val_confidence": 0.99}
    # 4 points below the best: beyond 0.0305 with 2,000 responses, within 0.0431 with 1,000
    assert decide(2000, [0.80, 0.76], **kw) == [None, "val_decline"]
    assert decide(1000, [0.80, 0.76], **kw) == [None, None]
    # the same 4 points below a best that was the highest of 10 validations: bound 0.0405
    assert decide(2000, [0.80] + [0.78] * 9 + [0.76], **kw)[-1] is None
    # and the practical threshold still applies: 2.9 points is no decline however many samples
    assert decide(10**6, [0.80, 0.771], **kw) == [None, None]
    # samples given as a setting win over the counted ones
    assert decide(1000, [0.80, 0.76], val_samples=2000, **kw) == [None, "val_decline"]


def test_plateau_waits_for_an_improvement_beyond_noise():
    kw = {"val_plateau": 2, "val_confidence": 0.99}
    # +1 point on the first validation is within noise for 2,000 responses: no phase of
    # improvements, so no plateau however long it lasts
    assert decide(2000, [0.70, 0.71, 0.70, 0.70, 0.705, 0.70], **kw) == [None] * 6
    # +5 points is an improvement (bound 2.326348 * sqrt(2 * 0.725 * 0.275 / 2000) = 0.0328);
    # then two validations without a new best are a plateau
    assert decide(2000, [0.70, 0.75, 0.74, 0.745], **kw) == [None, None, None, "val_plateau"]


def test_the_bound_needs_the_sample_count_and_a_mean_of_unit_scores():
    ctl = ResetController(ProRLSettings(val_metric="acc", val_decline=0.03))
    with pytest.raises(ProRLError, match="set recipes.prorl.val_samples"):
        ctl.after_validation(20, {"acc": 0.5})
    with pytest.raises(ProRLError, match=r"acc is 1.5, outside \[0, 1\]"):
        ctl.after_validation(20, {"acc": 1.5}, samples=500)


PRESET = REPO / "configs" / "experiment" / "prorl_deepseek_r1_distill_qwen_1_5b.yaml"
MATH500 = 500  # questions of the preset's validation set


def preset() -> tuple[ProRLSettings, int, int, int]:
    """The ProRL preset's triggers and validations: settings, samples per question, validation
    interval and steps, read from its YAML."""
    cfg = OmegaConf.load(PRESET)
    settings = load(ProRLSettings, OmegaConf.to_container(cfg.recipes.prorl), "recipes.prorl")
    per_question = cfg.actor_rollout_ref.rollout.val_kwargs.n
    assert settings.val_metric.endswith(f"/mean@{per_question}")  # verl's name for that many samples
    return settings, per_question, cfg.trainer.test_freq, cfg.trainer.total_training_steps


def simulate(settings, accuracy, seed, per_question, every, steps, questions=MATH500):
    """A run's validations, each the mean of questions x per_question Bernoulli(accuracy(step))
    draws (for one accuracy, the noisiest case: questions of different difficulty vary less),
    fed to the controller as the trainer does (after the validation of step N, the reset applies
    at the start of step N + 1). Returns [(step, trigger)]."""
    rng = np.random.default_rng(seed)
    n = questions * per_question
    ctl, fired = ResetController(settings), []
    for step in range(every, steps + 1, every):
        ctl.after_validation(step, {settings.val_metric: rng.binomial(n, accuracy(step)) / n}, samples=n)
        trigger = ctl.take_pending(step + 1)
        if trigger:
            ctl.record_reset(step, trigger)
            fired.append((step, trigger))
    return fired


SEEDS = range(20)


def test_a_flat_model_does_not_reset_on_noise():
    """The preset, a model flat at 80% on MATH-500 for 2,000 steps: at most one reset per run.
    The raw rules on one sample per question (the preset before) fired 14-18 times per run,
    spaced only by min_gap."""
    settings, per_question, every, steps = preset()
    runs = [simulate(settings, lambda step: 0.8, seed, per_question, every, steps) for seed in SEEDS]
    assert all(len(fired) <= 1 for fired in runs), runs
    assert sum(map(len, runs)) <= 2
    raw = dataclasses.replace(settings, val_confidence=None)
    before = [len(simulate(raw, lambda step: 0.8, seed, 1, every, steps)) for seed in SEEDS]
    assert min(before) >= 10, before


def test_a_true_degradation_fires_at_the_next_validation():
    """80% for 1,000 steps, then 75%: val_decline at the first validation after the fall in every
    run (before it, at most the one noise reset a flat model may have). With one sample per
    question the bound (7.8-10.8 points) lets the same fall go unseen for longer in most runs,
    which is why the preset validates with 8."""
    settings, per_question, every, steps = preset()

    def accuracy(step):
        return 0.80 if step <= 1000 else 0.75

    for seed in SEEDS:
        fired = simulate(settings, accuracy, seed, per_question, every, steps)
        after = [f for f in fired if f[0] > 1000]
        assert after and after[0] == (1000 + every, "val_decline"), (seed, fired)
        assert len(fired) - len(after) <= 1, (seed, fired)
    late = [[f for f in simulate(settings, accuracy, seed, 1, every, steps) if f[0] > 1000] for seed in SEEDS]
    assert sum(not f or f[0][0] > 1000 + every for f in late) >= len(SEEDS) // 2, late


def test_a_true_plateau_fires_once_after_the_improvement_stops():
    """60% rising to 80% over 600 steps, then flat: a val_plateau reset within 400 steps of the
    rise's end in every run, and the flat 1,000 steps after it are no plateau of improvements
    (nothing fires there). A rise of 0.67 points per validation can also stall for 4 validations
    by chance; that early plateau is allowed once."""
    settings, per_question, every, steps = preset()

    def accuracy(step):
        return 0.60 + 0.20 * min(step, 600) / 600

    runs = [simulate(settings, accuracy, seed, per_question, every, steps) for seed in SEEDS]
    for fired in runs:
        assert {t for _, t in fired} == {"val_plateau"}, runs
        assert any(600 < step <= 1000 for step, _ in fired), runs
        assert len(fired) <= 2 and all(step <= 1000 for step, _ in fired), runs
    assert sum(map(len, runs)) <= len(SEEDS) + 2, runs


def test_the_samples_are_counted_from_the_validation_set():
    # verl's RLHFDataset keeps its rows in `dataframe`, a datasets.Dataset; the stand-in has only that
    rows = datasets.Dataset.from_dict({"data_source": ["math500"] * 5 + ["aime24"] * 2})
    val = SimpleNamespace(dataframe=rows)
    assert validation_samples(val, "val-core/math500/acc/mean@8") == 40
    assert validation_samples(val, "val-aux/aime24/acc/mean@1") == 2
    with pytest.raises(ProRLError, match="no rows of data source 'gsm8k'"):
        validation_samples(val, "val-core/gsm8k/acc/mean@8")
    with pytest.raises(ProRLError, match="set recipes.prorl.val_samples"):
        validation_samples(val, "val/acc")


def test_the_hooks_count_the_samples_once_and_say_what_the_bound_is(tmp_path, capsys):
    settings = ProRLSettings(val_metric="val-core/math500/acc/mean@8", val_decline=0.03, val_confidence=0.99)
    hooks = ProRLHooks(settings)
    hooks.training = True
    rows = datasets.Dataset.from_dict({"data_source": ["math500"] * 250})
    # the trainer is a stand-in: validations reach the hooks without workers
    trainer = SimpleNamespace(
        global_steps=20,
        val_dataset=SimpleNamespace(dataframe=rows),
        config=OmegaConf.create({"trainer": {"default_local_dir": str(tmp_path)}}),
    )
    hooks.after_validation(trainer, {settings.val_metric: 0.80})
    trainer.global_steps = 40
    hooks.after_validation(trainer, {settings.val_metric: 0.76})
    out = capsys.readouterr().out
    assert hooks.samples == 2000 and hooks.ctl.state.pending == "val_decline"
    # 0.0304743 at 0.78 (test_noise_bound_by_hand); at 0.80: 2.326348 * sqrt(2 * 0.16 / 2000)
    assert "is a mean of 2000 graded responses: at 0.8000 a change counts when it exceeds 0.0294" in out
    assert "0.0400 below the best 0.8000 of 1 validation(s) (bound 0.0305)" in out
    assert "val_decline fires before step 41" in out


def test_the_config_check_matches_the_metric_to_the_validation_samples():
    def cfg(n):
        return OmegaConf.create(
            {
                "actor_rollout_ref": {
                    "actor": {"use_kl_loss": True, "strategy": "fsdp2"},
                    "ref": {"strategy": "fsdp2"},
                    "model": {},
                    "hybrid_engine": True,
                    "rollout": {"val_kwargs": {"n": n}},
                },
                "trainer": {"test_freq": 20},
            }
        )

    settings = ProRLSettings(val_metric="val-core/math500/acc/mean@8", val_decline=0.03)
    check(cfg(8), settings)
    with pytest.raises(ConfigError, match=r"mean@8 with actor_rollout_ref.rollout.val_kwargs.n=1: .* mean@1"):
        check(cfg(1), settings)
    custom = ProRLSettings(val_metric="my/score", val_plateau=2)
    with pytest.raises(ConfigError, match="set recipes.prorl.val_samples"):
        check(cfg(8), custom)
    check(cfg(8), ProRLSettings(val_metric="my/score", val_plateau=2, val_samples=4000))
    check(cfg(8), ProRLSettings(val_metric="my/score", val_plateau=2, val_confidence=None))


def test_missing_validation_metric_is_named():
    ctl = ResetController(ProRLSettings(val_metric="val-core/x/acc/mean@1", val_plateau=1))
    with pytest.raises(ProRLError, match=r"val-core/x/acc/mean@1.*val-core/y/acc/mean@1"):
        ctl.after_validation(5, {"val-core/y/acc/mean@1": 0.3})


def test_metrics_of_a_reset_step():
    ctl = ResetController(ProRLSettings(reset_every=2))
    assert ctl.after_step(1, {"actor/kl_loss": 0.25}) is None
    assert ctl.metrics(1, None) == {
        "prorl/resets": 0.0,
        "prorl/reset": 0.0,
        "prorl/steps_since_reset": 1.0,
        "prorl/kl_streak": 0.0,
        "prorl/suppressed": 0.0,
    }
    trigger = ctl.after_step(2, {"actor/kl_loss": 0.5})
    ctl.record_reset(2, trigger)
    m = ctl.metrics(2, trigger)
    assert m["prorl/resets"] == 1.0 and m["prorl/reset"] == 1.0 and m["prorl/steps_since_reset"] == 0.0
    assert m["prorl/reset_trigger/interval"] == 1.0 and m["prorl/reset_kl"] == 0.5


def test_state_survives_save_and_load(tmp_path):
    s = ProRLSettings(
        reset_every=5, kl_threshold=0.5, kl_patience=3, val_metric="v", val_plateau=3, val_samples=500
    )
    ctl = ResetController(s)
    run_steps(ctl, [0.1, 0.9, 0.9, 0.1, 0.1, 0.9, 0.9])
    ctl.after_validation(7, {"v": 0.3})
    ctl.after_validation(7, {"v": 0.2})
    ctl.save(str(tmp_path))
    again = ResetController(s)
    assert again.load(str(tmp_path))
    assert again.state == ctl.state and again.last_kl == ctl.last_kl
    assert again.state.kl_streak == 2 and again.state.since_best == 1
    # and both continue identically
    assert run_steps(again, [0.9, 0.1] * 4, start=8) == run_steps(ctl, [0.9, 0.1] * 4, start=8)
    assert not ResetController(s).load(str(tmp_path / "nothing"))


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"reset_every": -1}, "reset_every=-1"),
        ({"kl_patience": 0}, "kl_patience=0"),
        ({"kl_threshold": 0.0}, "kl_threshold=0.0"),
        ({"val_decline": 0.1}, "set recipes.prorl.val_metric"),
        ({"val_plateau": 2}, "set recipes.prorl.val_metric"),
        ({"val_confidence": 1.0}, r"val_confidence=1.0 must be in \[0.5, 1\)"),
        ({"val_confidence": 0.3}, r"val_confidence=0.3 must be in \[0.5, 1\)"),
        ({"val_samples": 0}, "val_samples=0 must be >= 1"),
    ],
)
def test_bad_settings_are_named(kwargs, message):
    with pytest.raises(ConfigError, match=message):
        load(ProRLSettings, kwargs, "recipes.prorl")


def test_resume_without_the_reference_snapshot_fails_clearly(tmp_path):
    """A checkpoint taken after a reset must carry the reference; the trainer refuses to go on with
    the initial model instead (before touching any worker)."""
    settings = ProRLSettings(reset_every=2)
    hooks = ProRLHooks(settings)
    trainer = SimpleNamespace(global_steps=4, actor_rollout_wg=None)  # the workers are never reached
    step = tmp_path / "global_step_4"
    step.mkdir()
    ResetController(settings, ControllerState(resets=2, last_reset_step=4)).save(str(step))
    with pytest.raises(ProRLError, match=r"prorl_reference is missing: .* after 2 reference reset"):
        hooks.load(trainer, str(step))


# ------------------------------------------------------------------------------ the worker
@pytest.fixture(scope="module")
def probe(recipes_cache, tiny_model, tmp_path_factory):
    cache = recipes_cache  # the session's tiny model, already built (tests/conftest.py)
    snap = tmp_path_factory.mktemp("snap")
    proc = subprocess.run(
        [sys.executable, str(REPO / "tests" / "prorl_worker_probe.py"), str(cache), str(snap / "ref")],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=300,
    )
    lines = [line for line in proc.stdout.splitlines() if line.startswith("PROBE ")]
    assert proc.returncode == 0 and lines, (proc.stdout[-2000:], proc.stderr[-4000:])
    return json.loads(lines[-1].removeprefix("PROBE "))


@pytest.mark.slow
def test_worker_reset_makes_the_reference_equal_to_the_actor(probe):
    assert probe["initial_param_diff"] == 0.0  # both engines load the same model
    assert probe["trained_param_diff"] > 1e-3 and probe["trained_logits_diff"] > 1e-2
    assert probe["keep_optimizer"]["elements"] == 123456  # every parameter of the tiny model
    for case in ("keep", "reset"):
        # equal shards, and equal outputs: the copy reached what FSDP2 all-gathers for a forward
        assert probe[case]["param_diff"] == 0.0, case
        assert probe[case]["logits_diff"] == 0.0, case
        assert probe[case]["schedule_same"], case  # learning rate and scheduler position
    assert probe["pre_reset_param_diff"] > 1e-3


@pytest.mark.slow
def test_worker_reset_clears_the_optimizer_only_when_asked(probe):
    keep, reset = probe["keep"], probe["reset"]
    assert keep["moments_same"] and keep["n_states"] > 0
    # kept moments: the next step continues them (3rd step), far from a first step's moments
    assert keep["next_step"]["steps"] == [3.0] and keep["next_step"]["exp_avg"] > 1e-2
    # reset: no state left (AdamW's zero moments), the lr the schedule had set is kept
    assert reset["n_states"] == 0 and reset["lr"] == [0.01]
    # and the next step is exactly a fresh AdamW's first: m = (1-b1) g, v = (1-b2) g^2, step 1
    assert reset["next_step"]["steps"] == [1.0]
    assert reset["next_step"]["exp_avg"] < 1e-5 and reset["next_step"]["exp_avg_sq"] < 1e-5


@pytest.mark.slow
def test_worker_reference_snapshot_round_trip(probe):
    snap = probe["snapshot"]
    assert snap["files"] == ["rank_0.pt"]
    assert snap["moved"] > 1e-3 and snap["restored"] == 0.0
    assert "same number of GPUs" in snap["wrong_world_error"]


def test_snapshots_of_rotated_checkpoints_are_deleted(tmp_path):
    """verl's max_actor_ckpt_to_keep removes only a checkpoint's actor/ folder; the reference
    snapshot of such a step goes with it, the other steps' snapshots stay."""
    hooks = ProRLHooks(ProRLSettings(reset_every=2))  # no reset yet: no worker call
    for step, has_actor in ((2, False), (4, True), (6, False)):  # 6: being saved, verl writes actor/ next
        (tmp_path / f"global_step_{step}" / "prorl_reference").mkdir(parents=True)
        if has_actor:
            (tmp_path / f"global_step_{step}" / "actor").mkdir()
    hooks.save(SimpleNamespace(), str(tmp_path / "global_step_6"))
    assert not (tmp_path / "global_step_2" / "prorl_reference").exists()
    assert (tmp_path / "global_step_4" / "prorl_reference").is_dir()
    assert (tmp_path / "global_step_6" / "prorl_reference").is_dir()
    assert (tmp_path / "global_step_6" / "prorl_state.json").is_file()
