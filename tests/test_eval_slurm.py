"""The evaluation Slurm scripts (convert.sbatch, eval_iterative.sbatch, eval_checkpoint.sbatch):
shellcheck, the commands they print under DRY_RUN=1, their argument checks, and the scripts run as
a job (no DRY_RUN, SLURM_JOB_ID set by hand) with a stand-in `python` that records its arguments in
place of eval.convert and eval.run (the GPU programs). No Slurm or GPU needed; a few seconds. The
real programs run in tests/test_slurm_cluster.py's convert and iterative-evaluation jobs."""

import json
import os
import shlex
import subprocess
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
SLURM = REPO / "scripts" / "slurm"
SCRIPTS = [SLURM / "convert.sbatch", SLURM / "eval_iterative.sbatch", SLURM / "eval_checkpoint.sbatch"]
PREFIX = "[dry-run] "


# shellcheck runs over these scripts in tests/test_slurm.py (every *.sh / *.sbatch under scripts/).


@pytest.mark.parametrize("script", SCRIPTS, ids=lambda p: p.name)
def test_headers_say_what_how_hardware_and_writes(script):
    header = script.read_text().split("#SBATCH", 1)[0]
    for needed in ("sbatch scripts/slurm/" + script.name, "DRY_RUN=1 bash scripts/slurm/" + script.name):
        assert needed in header
    for section in ("What it does", "Hardware:", "Writes:", "Environment variables"):
        assert section in header, section


def _env(**extra: str) -> dict[str, str]:
    env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "HOME": os.environ.get("HOME", "/tmp")}
    env.update(extra)
    return env


def _run(script: Path, *args: str, **env: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        ["bash", str(script), *args], env=_env(**env), capture_output=True, text=True, timeout=30, cwd=REPO
    )


def _commands(stdout: str) -> list[list[str]]:
    return [shlex.split(line[len(PREFIX) :]) for line in stdout.splitlines() if line.startswith(PREFIX)]


def test_convert_dry_run_passes_the_arguments_through():
    proc = _run(SCRIPTS[0], "/runs/my run/checkpoints", "--every", "100", DRY_RUN="1")
    assert proc.returncode == 0, proc.stderr
    assert _commands(proc.stdout) == [
        ["cd", str(REPO)],
        ["python", "-m", "eval.convert", "/runs/my run/checkpoints", "--every", "100"],
    ]


def test_iterative_dry_run_uses_vllm_with_one_engine_per_gpu_set():
    proc = _run(SCRIPTS[1], "/runs/x/checkpoints", "--watch", "--benchmarks", "aime24,amc", DRY_RUN="1")
    assert proc.returncode == 0, proc.stderr
    assert _commands(proc.stdout)[-1] == [
        "python", "-m", "eval.iterate", "/runs/x/checkpoints", "--backend", "vllm",
        "--tensor-parallel-size", "1", "--watch", "--benchmarks", "aime24,amc",
    ]  # fmt: skip
    proc = _run(SCRIPTS[1], "/runs/x/checkpoints", DRY_RUN="1", SLURM_GPUS_ON_NODE="4", CONDA_ENV="evalenv")
    cmds = _commands(proc.stdout)
    assert cmds[0] == ["conda", "activate", "evalenv"]
    assert cmds[-1][-2:] == ["--tensor-parallel-size", "4"]
    assert _run(SCRIPTS[1], "/r", DRY_RUN="1", TP_SIZE="0").returncode == 2


def _hf_folder(path: Path) -> Path:
    path.mkdir(parents=True)
    (path / "config.json").write_text("{}")
    return path


def _verl_step(run: Path, step: int) -> Path:
    actor = run / "checkpoints" / f"global_step_{step}" / "actor"
    actor.mkdir(parents=True)
    (actor / "fsdp_config.json").write_text(json.dumps({"world_size": 1}))
    return actor.parent


def test_checkpoint_dry_run_for_a_downloaded_hf_model(tmp_path):
    model = _hf_folder(tmp_path / "PromptAug-1.5B")
    proc = _run(SCRIPTS[2], str(model), "--limit", "10", DRY_RUN="1")
    assert proc.returncode == 0, proc.stderr
    assert _commands(proc.stdout)[1:] == [
        ["python", "-m", "eval.run", "--model", str(model.resolve()), "--out", "results/PromptAug-1.5B",
         "--backend", "vllm", "--tensor-parallel-size", "1", "--limit", "10"],
    ]  # fmt: skip
    proc = _run(SCRIPTS[2], str(model), DRY_RUN="1", OUT_DIR="/results/paper")
    cmd = _commands(proc.stdout)[-1]
    assert cmd[cmd.index("--out") + 1] == "/results/paper"


@pytest.mark.parametrize("which", ["step", "actor"])
def test_checkpoint_dry_run_converts_a_verl_checkpoint_first(tmp_path, which):
    step = _verl_step(tmp_path / "run1", 2720)
    arg = step if which == "step" else step / "actor"
    proc = _run(SCRIPTS[2], str(arg), DRY_RUN="1")
    assert proc.returncode == 0, proc.stderr
    run = (tmp_path / "run1").resolve()
    assert _commands(proc.stdout)[1:] == [
        ["python", "-m", "eval.convert", str(run / "checkpoints" / "global_step_2720"), "--hf-root", str(run / "hf")],
        ["python", "-m", "eval.run", "--model", str(run / "hf" / "global_step_2720"),
         "--out", "results/run1_global_step_2720", "--backend", "vllm", "--tensor-parallel-size", "1"],
    ]  # fmt: skip


@pytest.mark.parametrize(
    ("script", "args", "message"),
    [
        (SCRIPTS[0], [], "usage: sbatch scripts/slurm/convert.sbatch CHECKPOINT_ROOT"),
        (SCRIPTS[1], [], "usage: sbatch scripts/slurm/eval_iterative.sbatch CHECKPOINT_ROOT"),
        (SCRIPTS[2], [], "usage: sbatch scripts/slurm/eval_checkpoint.sbatch MODEL_PATH"),
        (SCRIPTS[2], ["/no/such/model"], "MODEL_PATH '/no/such/model' is not a folder"),
    ],
)
def test_bad_arguments_fail_clearly(script, args, message):
    proc = _run(script, *args, DRY_RUN="1")
    assert proc.returncode == 2 and message in proc.stderr, proc.stderr


def test_checkpoint_refuses_a_folder_that_is_no_model(tmp_path):
    proc = _run(SCRIPTS[2], str(tmp_path), DRY_RUN="1")
    assert proc.returncode == 2 and "neither a HuggingFace model folder" in proc.stderr


@pytest.mark.parametrize("script", SCRIPTS, ids=lambda p: p.name)
def test_refuses_to_run_outside_slurm_without_dry_run(script, tmp_path):
    proc = _run(script, str(_hf_folder(tmp_path / "m")))
    assert proc.returncode == 2 and "not inside a Slurm job" in proc.stderr


FAKE_PYTHON = """#!/bin/bash
{ printf '%s\\037' "$@"; printf '\\n'; } >> "$FAKE_DIR/python_args"  # one line per call
pwd >> "$FAKE_DIR/python_cwd"
case " $* " in *" eval.convert "*) exit "${FAKE_CONVERT_RC:-0}" ;; esac
exit "${FAKE_RUN_RC:-0}"
"""


def _fake_python(tmp_path: Path) -> dict[str, str]:
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "python").write_text(FAKE_PYTHON)
    (bin_dir / "python").chmod(0o755)
    return {
        "PATH": f"{bin_dir}:{os.environ.get('PATH', '/usr/bin:/bin')}",
        "FAKE_DIR": str(tmp_path),
        "SLURM_JOB_ID": "77",
    }


def _calls(tmp_path: Path) -> list[list[str]]:
    return [line.split("\x1f")[:-1] for line in (tmp_path / "python_args").read_text().splitlines()]


def test_job_with_stand_in_python_runs_convert_then_eval_in_the_repo_and_propagates_status(tmp_path):
    """Stand-ins: `python` (eval.convert loads a verl checkpoint and eval.run starts vLLM on a GPU,
    which cannot run here) and the Slurm job (SLURM_JOB_ID set by hand); the scripts are the real
    ones, run as a job. The stand-in records each call's arguments and working folder and exits
    with the status the test gives it."""
    step = _verl_step(tmp_path / "run1", 5)
    env = _fake_python(tmp_path)
    proc = _run(SCRIPTS[2], str(step), "--repeats", "1", **env)
    assert proc.returncode == 0, proc.stderr
    calls = _calls(tmp_path)
    assert [c[:2] for c in calls] == [["-m", "eval.convert"], ["-m", "eval.run"]]
    assert calls[1][-2:] == ["--repeats", "1"]
    assert set((tmp_path / "python_cwd").read_text().split()) == {str(REPO)}
    # a failed conversion stops the job with its status, before any evaluation
    (tmp_path / "python_args").unlink()
    proc = _run(SCRIPTS[2], str(step), **env, FAKE_CONVERT_RC="1")
    assert proc.returncode == 1 and [c[1] for c in _calls(tmp_path)] == ["eval.convert"]
    proc = _run(SCRIPTS[1], str(tmp_path / "run1" / "checkpoints"), **env, FAKE_RUN_RC="2")
    assert proc.returncode == 2
    proc = _run(SCRIPTS[0], str(tmp_path / "run1" / "checkpoints"), **env, FAKE_CONVERT_RC="1")
    assert proc.returncode == 1
