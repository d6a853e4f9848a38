"""ProRL (recipes/methods/prorl.py): the reset triggers step by step, the worker's reset on verl's real
FSDP2 engines in a fresh interpreter, and the trainer's refusal to resume without a snapshot.
The end-to-end run through verl's trainer (KL back to 0 after each reset, resume with the same
reference) is in tests/test_train_e2e.py."""

import json
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest

from recipes.methods.prorl import ControllerState, ProRLError, ProRLHooks, ProRLSettings, ResetController
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


def test_validation_decline_below_the_best():
    ctl = ResetController(ProRLSettings(val_metric="val/acc", val_decline=0.05))
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
    ctl = ResetController(ProRLSettings(val_metric="val/acc", val_plateau=2))
    values = [0.4, 0.5, 0.5, 0.45, 0.6, 0.55, 0.6]  # equal to the best is not a new best
    fired = [validate(ctl, 10 * (i + 1), v) for i, v in enumerate(values)]
    assert fired == [None, None, None, "val_plateau", None, None, "val_plateau"]


def test_validation_trigger_waits_for_the_next_step_and_respects_min_gap():
    ctl = ResetController(ProRLSettings(val_metric="val/acc", val_decline=0.0, min_gap=5, reset_every=0))
    ctl.after_validation(4, {"val/acc": 0.5})
    ctl.record_reset(4, "interval")  # pretend a reset just happened at step 4
    ctl.after_validation(6, {"val/acc": 0.5})
    ctl.after_validation(7, {"val/acc": 0.1})
    assert ctl.state.pending == "val_decline"
    assert ctl.take_pending(8) is None  # step 7 is 3 steps after the reset at 4: dropped
    assert ctl.state.pending is None and ctl.state.suppressed == 1


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
    s = ProRLSettings(reset_every=5, kl_threshold=0.5, kl_patience=3, val_metric="v", val_plateau=3)
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
