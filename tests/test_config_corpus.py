"""The corpus of hostile command lines for `python -m recipes.train`: each once ended in a traceback,
or passed `--check` and failed later (in a Ray worker, or by training nothing). Each must now be one
`config error:` line naming what is wrong, exit 2, before Ray. A bad input found later is a new row.

The rows run in this process through `check_only`, the function `--check` calls (it composes the
config and runs every check a launch makes before Ray); one test runs the command itself."""

import os
import subprocess
import sys
from pathlib import Path

import pytest

from recipes.checks import check_config
from recipes.train import check_only, compose

REPO = Path(__file__).resolve().parent.parent
LONG = "a" * 300
MICRO = "actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu"

# (arguments after `experiment=demo_cpu`, what the one line must name)
CORPUS = [
    # tracebacks before (ZeroDivisionError, ValueError, Hydra's InstantiationException, TypeError)
    ([f"{MICRO}=0"], f"{MICRO}=0 must be an integer >= 1"),
    ([f"{MICRO}=abc"], f"{MICRO}='abc' must be an integer >= 1"),
    (["algorithm.adv_estimator=gae"], "algorithm.adv_estimator=gae trains a critic"),
    (["critic.enable=true"], "critic.enable=true trains a critic"),
    (["algorithm.adv_estimator=gae", "critic.enable=false"], "algorithm.adv_estimator=gae trains a critic"),
    (["data.train_files=[]"], "data.train_files=[] must name a parquet file"),
    (["trainer.logger=5"], "trainer.logger=5 must be a string or list"),
    (["recipes.output_dir={tmp}/" + LONG], "cannot write there (File name too long)"),
    # `--check` with -v, --cfg job or Hydra's flags
    ([f"{MICRO}=0", "-v"], f"{MICRO}=0 must be"),
    ([f"{MICRO}=0", "--cfg", "job"], f"{MICRO}=0 must be"),
    (["-m", "trainer.total_epochs=1,2"], "--check takes overrides, -v and --cfg job, not --multirun"),
    (["--cfg", "hydra"], "not --cfg hydra"),
    (["--cfg", "jobs"], "argument --cfg/-c: invalid choice: 'jobs'"),
    (["--no-such-flag"], "--no-such-flag: not an argument of python -m recipes.train"),
    # passed --check, failed later
    (["trainer.save_freq=often"], "trainer.save_freq='often' must be an integer."),
    (["trainer.test_freq=2.5"], "trainer.test_freq=2.5 must be an integer."),
    (["data.seed=abc"], "data.seed='abc' must be an integer or null."),
    (["data.train_batch_size=4.0"], "data.train_batch_size=4.0 must be an integer >= 1."),
    ([f"{MICRO}=-1"], f"{MICRO}=-1 must be an integer >= 1 (or null)."),
    (
        ["actor_rollout_ref.rollout.log_prob_micro_batch_size_per_gpu=0"],
        "log_prob_micro_batch_size_per_gpu=0",
    ),
    (
        ["actor_rollout_ref.ref.log_prob_micro_batch_size_per_gpu=0"],
        "ref.log_prob_micro_batch_size_per_gpu=0",
    ),
    (["recipes.deterministic=maybe"], "recipes.deterministic='maybe' must be true or false."),
    (["actor_rollout_ref.actor.use_kl_loss=maybe"], "use_kl_loss='maybe' must be true or false."),
    (["trainer.val_before_train=1"], "trainer.val_before_train=1 must be true or false."),
    (["actor_rollout_ref.actor.clip_ratio_low=abc"], "clip_ratio_low='abc' must be a number."),
    (["data.max_prompt_length=nan"], "data.max_prompt_length=nan must be an integer >= 1."),
    (["trainer.nnodes=null"], "trainer.nnodes=null must be an integer >= 1."),
    (["trainer.resume_mode=sometimes"], "trainer.resume_mode='sometimes' must be one of 'auto'"),
    (["data.val_files=[]"], "data.val_files=[] must name a parquet file"),
    (["data.train_files=[1,2]"], "data.train_files=[1, 2] must name a parquet file"),
    # names: one line of at most 255 bytes (a longer one died in chained tracebacks at launch)
    ([f"trainer.experiment_name={LONG}"], "trainer.experiment_name='aaa"),
    ([f"trainer.project_name={LONG}"], "is 300 bytes long"),
    (["trainer.experiment_name='two\nlines'"], "must be one line of printable characters"),
    (["trainer.experiment_name=${oc.env:RECIPES_TEST_NAME}"], "'run\\none' must be one line"),
    (["trainer.experiment_name=two\nlines"], "trainer.experiment_name=two lines"),  # Hydra's parser
    # contradictions: the method's own setting, and responses that cannot differ
    (
        ["method=[dr_grpo]", "algorithm.norm_adv_by_std_in_grpo=true"],
        "norm_adv_by_std_in_grpo=true contradicts",
    ),
    (["actor_rollout_ref.rollout.temperature=0"], "rollout.temperature=0 decodes greedily"),
    (["actor_rollout_ref.rollout.top_k=1"], "rollout.top_k=1 decodes greedily"),
    # toy data written into a folder the data tool did not make (it wrote over its train.parquet)
    (["data.train_files={tmp}/theirs/train.parquet"], "did not write, and toy data would replace them"),
]


def test_every_hostile_config_is_one_config_error_line_and_exit_2(tiny_model, tmp_path, capfd, monkeypatch):
    """No row may pass (an acceptance), raise (a traceback) or print more than its one line."""
    monkeypatch.setenv("RECIPES_TEST_NAME", "run\none")
    monkeypatch.chdir(tmp_path)  # a row that got as far as writing would write here
    theirs = tmp_path / "theirs"
    theirs.mkdir()
    (theirs / "train.parquet").write_bytes(b"someone's data")
    wrong = []
    for args, message in CORPUS:
        try:
            check_only(["experiment=demo_cpu", *(a.replace("{tmp}", str(tmp_path)) for a in args)])
        except SystemExit as exc:
            code = exc.code
        except BaseException as exc:  # noqa: BLE001 - a traceback is what the corpus is for
            code = f"raised {type(exc).__name__}: {exc}"[:300]
        else:
            code = "accepted"
        out, err = capfd.readouterr()
        lines = err.strip().splitlines()
        one_line = len(lines) == 1 and lines[0].startswith("config error: ") and message in lines[0]
        if code != 2 or not one_line or "Traceback" in out + err:
            wrong.append((args, code, err[-500:]))
    assert not wrong, "\n".join(map(str, wrong))
    assert list(tmp_path.iterdir()) == [theirs] and [p.name for p in theirs.iterdir()] == ["train.parquet"]
    assert (theirs / "train.parquet").read_bytes() == b"someone's data"
    # the contradiction checks refuse what contradicts, not their neighbours
    for args in [
        ["method=[grpo]", "algorithm.norm_adv_by_std_in_grpo=true"],  # GRPO divides by the std
        ["actor_rollout_ref.rollout.val_kwargs.temperature=0"],  # greedy validation
        ["trainer.experiment_name=2024"],  # Hydra reads it as a number
    ]:
        check_config(compose(["experiment=demo_cpu", *args]))


def test_check_takes_verbose_and_cfg_job_and_prints_the_runs_own_folder(
    tiny_model, tmp_path, capfd, monkeypatch
):
    """`--check -v --cfg job` was a traceback, and `--cfg job` printed output_dir .../None for a run
    that names itself (experiment_name null): the folder is the one the run writes to."""
    monkeypatch.chdir(tmp_path)
    check_only(["experiment=demo_cpu", "trainer.experiment_name=null", "-v", "--cfg", "job"])
    out = capfd.readouterr().out
    run = "outputs/verl_math_recipes/tiny-toy_arithmetic-grpo-seed42"
    assert f"\n  output_dir: {run}\n" in out and f"\n  default_local_dir: {run}/checkpoints\n" in out
    assert out.splitlines()[-1].startswith("preflight: ok platform=cpu")
    assert not (tmp_path / "outputs").exists()  # checked, not written


@pytest.mark.slow  # fresh interpreters (~2 s each: the checks fail before verl is imported)
def test_the_command_line_form_is_one_line_exit_2_no_ray_and_writes_nothing(tmp_path):
    """The launch with a 300-character name died in four chained tracebacks and left outputs/ in
    the current folder; `--check` with -v and --cfg job was a traceback."""
    env = {**os.environ, "PYTHONPATH": str(REPO), "RECIPES_CACHE": str(tmp_path / "cache")}
    for args, message in [
        (["experiment=demo_cpu", f"trainer.experiment_name={LONG}"], "is 300 bytes long"),
        (["--check", "experiment=demo_cpu", f"{MICRO}=0", "-v", "--cfg", "job"], f"{MICRO}=0 must be"),
        (
            ["experiment=demo_cpu", "algorithm.adv_estimator=gae"],
            "algorithm.adv_estimator=gae trains a critic",
        ),
    ]:
        proc = subprocess.run(
            [sys.executable, "-m", "recipes.train", *args],
            cwd=tmp_path,
            capture_output=True,
            text=True,
            timeout=120,
            env=env,
        )
        assert proc.returncode == 2, (args, proc.stderr[-2000:])
        assert proc.stderr.startswith("config error: ") and message in proc.stderr, proc.stderr[-2000:]
        assert len(proc.stderr.strip().splitlines()) == 1 and "ray" not in proc.stdout.lower()
    assert not any(tmp_path.iterdir())
