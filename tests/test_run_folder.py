"""A run's folder: named from what defines the run; a launch into a folder that holds another run
stops before Ray (recipes/run_folder.py)."""

import os
import subprocess
import sys
from pathlib import Path

import pytest

from recipes.run_folder import check_same_run, resolved_yaml
from recipes.settings import ConfigError
from recipes.train import compose, preflight

REPO = Path(__file__).resolve().parent.parent


def test_runs_without_a_preset_are_named_from_model_data_methods_and_seed():
    def folder(*args):
        return compose(["platform=cpu", *args]).recipes.output_dir

    base = ("model=tiny", "data=toy_arithmetic")
    assert folder(*base) == "outputs/verl_math_recipes/tiny-toy_arithmetic-grpo-seed42"
    names = {
        folder(*base),
        folder(*base, "method=[dapo]"),
        folder(*base, "method=[dapo,prompt_aug]"),
        folder(*base, "data.seed=1"),
        folder("model=smollm2_135m", "data=toy_arithmetic"),
    }
    assert len(names) == 5  # five different runs, five folders
    assert folder(*base, "method=[dapo,prompt_aug]").endswith("/tiny-toy_arithmetic-dapo+prompt_aug-seed42")
    # a model and data given as paths: the model's name, the train file's folder and name
    paths = folder(
        "actor_rollout_ref.model.path=Qwen/Qwen2.5-0.5B",
        "data.train_files=/d/gsm8k/train.parquet",
        "data.val_files=/d/gsm8k/test.parquet",
    )
    assert paths == "outputs/verl_math_recipes/Qwen2.5-0.5B-gsm8k_train-grpo-seed42"
    # a preset names its own run; a name or folder given on the command line wins
    assert compose(["experiment=demo_cpu"]).recipes.output_dir == "outputs/verl_math_recipes/demo_cpu"
    assert folder(*base, "trainer.experiment_name=mine").endswith("/mine")


def _checkpointed(out: Path, *args: str, step: int = 2, launched: bool = False) -> None:
    """`out` as a run of `args` leaves it: its config.yaml and a checkpoint at `step`. `launched`:
    the config as a launch saves it, after the checks and preparations before Ray (which fill in
    some keys); else as composed, which is what `_check` compares it with."""
    cfg = compose(["experiment=demo_cpu", f"recipes.output_dir={out}", *args])
    if launched:
        preflight(cfg)
    (out / "checkpoints").mkdir(parents=True)
    (out / "checkpoints" / "latest_checkpointed_iteration.txt").write_text(str(step))
    (out / "config.yaml").write_text(resolved_yaml(cfg))


def _check(out: Path, *args: str) -> None:
    check_same_run(compose(["experiment=demo_cpu", f"recipes.output_dir={out}", *args]))


def test_a_launch_may_change_steps_logging_frequencies_and_paths_and_nothing_else(tmp_path):
    out = tmp_path / "run"
    _checkpointed(out, "trainer.total_training_steps=5")
    _check(out, "trainer.total_training_steps=5")  # the same run
    _check(
        out,
        "trainer.total_training_steps=50",
        "trainer.save_freq=10",
        "trainer.test_freq=10",
        "trainer.logger=[console,file,wandb]",
        "recipes.verbose=true",
        f"trainer.rollout_data_dir={tmp_path / 'dumps'}",
        f"recipes.cache_dir={tmp_path / 'cache'}",
    )
    with pytest.raises(ConfigError) as error:
        _check(out, "actor_rollout_ref.actor.optim.lr=0.001")
    message = str(error.value)
    assert message.startswith(f"{out} holds another run (checkpointed at step 2) whose config differs in ")
    assert "actor_rollout_ref.actor.optim.lr (0.0001 there, 0.001 now)" in message
    assert "trainer.experiment_name=NAME" in message and "recipes.force_resume=true" in message
    assert "\n" not in message
    # more than three keys: the first three, then how many more (a changed temperature shows
    # twice: verl copies it into its distillation section)
    with pytest.raises(
        ConfigError, match=r" \(1.0 there, 0.7 now\), data.seed \(42 there, 1 now\) and 2 more: start"
    ):
        _check(
            out,
            "data.seed=1",
            "actor_rollout_ref.actor.optim.lr=0.001",
            "algorithm.kl_ctrl.kl_coef=0.1",
            "actor_rollout_ref.rollout.temperature=0.7",
        )
    # another method: named first (what this project chose comes before what it sets in verl)
    with pytest.raises(
        ConfigError,
        match=r"differs in recipes\.methods\.grpo \(True there, None now\), "
        r"recipes\.methods\.dapo \(None there, True now\), actor_rollout_ref",
    ):
        _check(out, "method=[dapo]")
    _check(out, "actor_rollout_ref.actor.optim.lr=0.001", "recipes.force_resume=true")  # told to


def test_a_folder_with_nothing_to_resume_is_not_checked(tmp_path):
    out = tmp_path / "run"
    _checkpointed(out)
    (out / "checkpoints" / "latest_checkpointed_iteration.txt").unlink()  # never checkpointed
    _check(out, "actor_rollout_ref.actor.optim.lr=0.001")
    (out / "checkpoints" / "latest_checkpointed_iteration.txt").write_text("2")
    (out / "config.yaml").unlink()  # no config.yaml to compare with (made before there was one)
    _check(out, "actor_rollout_ref.actor.optim.lr=0.001")


@pytest.mark.slow  # a fresh interpreter importing verl
def test_the_command_stops_before_ray_and_writes_nothing(recipes_cache, tiny_model, tmp_path):
    out = tmp_path / "run"
    _checkpointed(out, launched=True)
    before = sorted(p.relative_to(out) for p in out.rglob("*"))
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "recipes.train",
            "experiment=demo_cpu",
            f"recipes.output_dir={out}",
            "data.seed=3",
        ],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=180,
        env={**os.environ, "RECIPES_CACHE": str(recipes_cache)},
    )
    assert proc.returncode == 2, proc.stderr[-3000:]
    assert proc.stderr.strip().splitlines() == [
        f"config error: {out} holds another run (checkpointed at step 2) whose config differs in data.seed "
        "(42 there, 3 now): start a new run with trainer.experiment_name=NAME or recipes.output_dir=DIR, "
        "or continue that run with these settings with recipes.force_resume=true."
    ]
    assert "ray" not in proc.stdout.lower()
    assert sorted(p.relative_to(out) for p in out.rglob("*")) == before  # no log, no hydra/, nothing


def test_slurm_resources_may_change_on_resume():
    # what a job asks Slurm for is not what the run computes, and runs checkpointed before
    # recipes.slurm existed have none in their config.yaml
    import yaml

    from recipes.run_folder import differences, resolved_yaml
    from recipes.train import compose

    now = yaml.safe_load(resolved_yaml(compose(["experiment=demo_cpu", "recipes.slurm.time=72:00:00"])))
    old = yaml.safe_load(resolved_yaml(compose(["experiment=demo_cpu"])))
    del old["recipes"]["slurm"]
    assert differences(old, now) == []
