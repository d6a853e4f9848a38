"""The sbatch scripts under a real Slurm: scripts/slurm/local_cluster.sh brings up a two-node
cluster on this machine (slurmctld, two slurmd on 127.0.0.1, a private munged), and every test
submits with `sbatch`, polls `squeue` and reads the job's own log (no accounting daemon).

One run goes through its life as a user's would: trained on both nodes (a Ray head on node1, a
worker on node2, verl's FSDP over the two) and `scancel`ed mid-step (the teardown ends every
process of the job on both nodes inside Slurm's kill wait), resubmitted (it resumes from the last
checkpoint and finishes), resubmitted again (it says it is done, with no Ray cluster started),
converted with convert.sbatch and evaluated with eval_iterative.sbatch. Its jobs name their folder
with OUTPUT_DIR, as docs/slurm.md shows (the last two through `python -m recipes.submit`, which
asks Slurm for the resources the config names), while the default folder (outputs/<project>/demo_cpu,
relative to the submit directory, a folder of the test's own) holds another run: every step of
train.sbatch (its preflight, its finished-run path, the training) must use OUTPUT_DIR, not that
one. Two failures must be quick and clear: a node whose `ray start` fails, and a bad Hydra override
(before any `ray start`, exit 2).

`pytest -m slurm` runs only these; the module brings the cluster up and tears it down.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest

from recipes.platforms.cpu_vllm import carries, shm_files
from recipes.run_folder import resolved_yaml
from recipes.train import compose

REPO = Path(__file__).resolve().parents[1]
CLUSTER = REPO / "scripts" / "slurm" / "local_cluster.sh"
VENV_BIN = Path(sys.executable).parent

pytestmark = [pytest.mark.slurm, pytest.mark.slow, pytest.mark.timeout(1500)]

# each training job: two CPUs per node (the nodes declare this machine's count), no GPUs
# (platform=cpu's logical slots); the script itself asks for all of each node's memory (--mem=0)
CPU_JOB = ["--cpus-per-task=2", "--gpus-per-node=0"]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def checkout_with_another_run(folder: Path) -> tuple[Path, Path]:
    """A submit directory (train.sbatch's REPO_DIR: the jobs' working directory) whose default run
    folder for `experiment=demo_cpu` holds another run, finished, differing in data.seed; the
    directory and that run folder. The code is the repository's (its scripts/ linked; the Python
    packages are installed in the environment), so the default folder is this test's, never the
    repository's outputs/."""
    checkout = folder / "checkout"
    checkout.mkdir()
    (checkout / "scripts").symlink_to(REPO / "scripts", target_is_directory=True)
    other = compose(["experiment=demo_cpu", "data.seed=7"])
    default = checkout / other.recipes.output_dir
    (default / "checkpoints").mkdir(parents=True)
    (default / "config.yaml").write_text(resolved_yaml(other))
    (default / "checkpoints" / "latest_checkpointed_iteration.txt").write_text("5")
    return checkout, default


def folder_state(folder: Path) -> dict:
    return {str(p.relative_to(folder)): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()}


@pytest.fixture(scope="module")
def cluster(tmp_path_factory, recipes_cache):
    """The local cluster, up for this module; {env} to submit with, the submit directory
    (checkout) and its default run folder that holds another run (default, its files in
    default_before)."""
    folder = tmp_path_factory.mktemp("slurm")
    checkout, default = checkout_with_another_run(folder)
    env = {
        **os.environ,
        "LOCAL_SLURM_DIR": str(folder / "cluster"),
        "LOCAL_SLURM_PORT": "26817",  # slurmctld, node1's and node2's slurmd: 26817-26819
    }
    up = subprocess.run(["bash", str(CLUSTER), "up"], env=env, capture_output=True, text=True, timeout=600)
    assert up.returncode == 0, up.stdout + up.stderr
    env.update(
        SLURM_CONF=str(folder / "cluster" / "slurm.conf"),
        RECIPES_LOCAL_CLUSTER="1",
        RECIPES_CACHE=str(recipes_cache),
        PATH=f"{VENV_BIN}:{os.environ['PATH']}",
        PYTHON=sys.executable,
        RAY_PORT=str(_free_port()),
        RAY_DASHBOARD_PORT=str(_free_port()),
        # short: Ray's socket paths under it must stay within 107 bytes
        RAY_TMPDIR=tempfile.mkdtemp(prefix="rs-", dir="/tmp"),
        RAY_LOG_DIR=str(folder / "raylogs"),
        RAY_WAIT_INTERVAL="1",
        RAY_DEDUP_LOGS="0",
    )
    try:
        yield {
            "env": env,
            "dir": folder,
            "checkout": checkout,
            "default": default,
            "default_before": folder_state(default),
        }
    finally:
        down = subprocess.run(
            ["bash", str(CLUSTER), "down"], env=env, capture_output=True, text=True, timeout=120
        )
        assert down.returncode == 0, down.stdout + down.stderr
        daemons = subprocess.run(["pgrep", "-f", str(folder / "cluster")], capture_output=True, text=True)
        assert not daemons.stdout.strip(), f"daemons left: {daemons.stdout}"
        shutil.rmtree(env["RAY_TMPDIR"], ignore_errors=True)


def submit(
    cluster, script: str, *args: str, sbatch: tuple = (), name: str = "job", env: dict | None = None
) -> str:
    out = cluster["dir"] / f"{name}-%j.out"
    proc = subprocess.run(
        ["sbatch", "--parsable", f"--output={out}", *sbatch, str(REPO / "scripts" / "slurm" / script), *args],
        cwd=cluster["checkout"],
        env={**cluster["env"], **(env or {})},
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    return proc.stdout.strip().split(";")[0]


def submit_preset(cluster, *args: str, sbatch: tuple = (), name: str = "job", env: dict | None = None) -> str:
    """`python -m recipes.submit` as a user types it: the run's Slurm resources from its config
    (recipes.slurm), your own sbatch options before the overrides."""
    out = cluster["dir"] / f"{name}-%j.out"
    proc = subprocess.run(
        [sys.executable, "-m", "recipes.submit", "--parsable", f"--output={out}", *sbatch, *args],
        cwd=cluster["checkout"],
        env={**cluster["env"], **(env or {})},
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    return proc.stdout.strip().split(";")[0]


def allocation(cluster, job: str) -> dict[str, str]:
    """What Slurm gave the job (`scontrol show job`, remembered MinJobAge after it ends)."""
    proc = subprocess.run(
        ["scontrol", "show", "job", job, "-o"], env=cluster["env"], capture_output=True, text=True, timeout=30
    )
    found = dict(re.findall(r"(?:^|\s)(JobName|NumNodes|CPUs/Task|TimeLimit)=(\S+)", proc.stdout))
    if "NumNodes" in found:  # a range while pending (2-2)
        found["NumNodes"] = found["NumNodes"].split("-")[0]
    return found


def log_of(cluster, job: str, name: str = "job") -> str:
    path = cluster["dir"] / f"{name}-{job}.out"
    return path.read_text(errors="replace") if path.exists() else ""


def in_queue(cluster, job: str) -> bool:
    proc = subprocess.run(
        ["squeue", "-h", "-j", job, "-o", "%T"],
        env=cluster["env"],
        capture_output=True,
        text=True,
        timeout=30,
    )
    return bool(proc.stdout.strip())


def wait_done(cluster, job: str, timeout: float, name: str = "job") -> str:
    """Wait until the job has left the queue; its log."""
    deadline = time.monotonic() + timeout
    while in_queue(cluster, job):
        assert time.monotonic() < deadline, (
            f"job {job} still queued after {timeout} s:\n{log_of(cluster, job, name)[-3000:]}"
        )
        time.sleep(2)
    return log_of(cluster, job, name)


def exit_status(cluster, job: str) -> int:
    """The job's exit code, as slurmctld remembers a finished job (MinJobAge: 5 minutes)."""
    proc = subprocess.run(
        ["scontrol", "show", "job", job, "-o"], env=cluster["env"], capture_output=True, text=True, timeout=30
    )
    found = re.search(r"\bExitCode=(\d+):(\d+)", proc.stdout)
    assert found, proc.stdout + proc.stderr
    code, signal = int(found.group(1)), int(found.group(2))
    return 128 + signal if signal else code


def job_processes(job: str) -> list[int]:
    mark = f"RECIPES_SLURM_JOB={job}"
    return [
        int(p.name)
        for p in Path("/proc").iterdir()
        if p.name.isdigit() and int(p.name) != os.getpid() and carries(int(p.name), mark)
    ]


def leftovers(job: str, shm_before: set[str], not_ours, within: float = 10.0) -> list:
    """What of the job outlives it by more than `within` s: its processes (their command lines)
    and the /dev/shm files it made."""
    deadline = time.monotonic() + within
    while (left := job_processes(job)) and time.monotonic() < deadline:
        time.sleep(0.5)
    procs = [Path(f"/proc/{p}/cmdline").read_bytes()[:120] for p in left if Path(f"/proc/{p}").exists()]
    return procs + sorted({f"/dev/shm/{n}" for n in shm_files() - shm_before} - not_ours())


# ------------------------------------------------------------------------------ the run's life
def train_args(steps: int) -> list[str]:
    """(The run folder comes from OUTPUT_DIR.)"""
    return [
        "experiment=demo_cpu",
        f"trainer.total_training_steps={steps}",
        "trainer.save_freq=1",
        "actor_rollout_ref.actor.checkpoint.save_contents=[model,optimizer,extra,hf_model]",
        # the demo's 32 samples per step over two workers: 16 each
        "actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu=16",
        "actor_rollout_ref.rollout.log_prob_micro_batch_size_per_gpu=16",
        "actor_rollout_ref.ref.log_prob_micro_batch_size_per_gpu=16",
    ]


STEPS = 2  # the run's length: scancel'ed after checkpoint 1, the resubmission trains step 2


def two_node_job(cluster, out: Path, name: str) -> str:
    return submit(
        cluster,
        "train.sbatch",
        *train_args(STEPS),
        sbatch=("--nodes=2", *CPU_JOB),
        name=name,
        env={"OUTPUT_DIR": str(out)},
    )


def checked_in(log: str, out: Path) -> bool:
    """The job's preflight named OUTPUT_DIR's folder."""
    return f"-m recipes.train --check recipes.output_dir={out} experiment=demo_cpu" in log


@pytest.fixture(scope="module")
def run(cluster, tiny_model, shm_not_ours):
    """The two-node run through its first two jobs: trained on both nodes and `scancel`ed mid-step 2
    (after checkpoint 1), then resubmitted, which resumes and finishes. Each job's log, exit
    status and what of it outlived it (looked at as soon as it left the queue)."""
    out = cluster["dir"] / "run"
    tracker = out / "checkpoints" / "latest_checkpointed_iteration.txt"
    jobs = {}
    before = shm_files()
    job = two_node_job(cluster, out, "train")
    deadline = time.monotonic() + 900
    while not (tracker.exists() and tracker.read_text().strip() == str(STEPS - 1)):
        assert in_queue(cluster, job) and time.monotonic() < deadline, log_of(cluster, job, "train")[-4000:]
        time.sleep(1)
    subprocess.run(["scancel", job], env=cluster["env"], check=True, timeout=30)
    cancelled = time.monotonic()
    log = wait_done(cluster, job, 120, "train")
    gone_after_s = time.monotonic() - cancelled
    jobs["train"] = {"log": log, "gone_after_s": gone_after_s, "left": leftovers(job, before, shm_not_ours)}
    before = shm_files()
    job = two_node_job(cluster, out, "resume")
    log = wait_done(cluster, job, 900, "resume")
    status = exit_status(cluster, job)
    jobs["resume"] = {"log": log, "status": status, "left": leftovers(job, before, shm_not_ours)}
    return {"out": out, **jobs}


def test_two_node_job_trains_with_a_ray_node_on_each(run):
    log, out = run["train"]["log"], run["out"]
    assert "preflight: ok platform=cpu offline=1 done=0" in log and checked_in(log, out), log[-4000:]
    assert re.search(r"nodelist=node1 ray start --head", log) and re.search(
        r"nodelist=node2 ray start --address=127\.0\.0\.1:", log
    )
    assert "Ray cluster ready: 2 node(s), 2 GPU(s)" in log
    # verl trained over both nodes: the trainer got the allocation's shape, FSDP world size 2
    assert "trainer.nnodes=2 trainer.n_gpus_per_node=1" in log
    config = (out / "config.yaml").read_text()
    assert re.search(r"^  nnodes: 2$", config, re.M) and re.search(r"^  n_gpus_per_node: 1$", config, re.M)
    # each FSDP rank wrote its own shard of the model
    assert sorted(
        p.name
        for p in (out / "checkpoints" / f"global_step_{STEPS - 1}" / "actor").glob(
            "model_world_size_2_rank_*.pt"
        )
    ) == [
        "model_world_size_2_rank_0.pt",
        "model_world_size_2_rank_1.pt",
    ]


def test_scancel_mid_step_ends_every_process_of_the_job_within_slurms_kill_wait(run):
    train = run["train"]
    assert train["gone_after_s"] < 40, "the job outlived Slurm's kill wait (30 s)"
    assert "received SIGTERM" in train["log"] and "[sweep_job" in train["log"], train["log"][-3000:]
    assert not train["left"]


def test_the_resubmission_resumes_from_the_last_checkpoint_and_finishes(run):
    resume, out = run["resume"], run["out"]
    assert resume["status"] == 0, resume["log"][-4000:]
    assert "done: metrics in" in resume["log"] and "Ray cluster ready: 2 node(s), 2 GPU(s)" in resume["log"]
    assert (out / "checkpoints" / "latest_checkpointed_iteration.txt").read_text().strip() == str(STEPS)
    # it loaded checkpoint 1 and trained step 2 only (a scancel between a step's checkpoint and
    # its metrics line loses that line, not the step)
    launches = sorted((out / "metrics").glob("*.jsonl"))
    assert [json.loads(line)["step"] for line in launches[-1].read_text().splitlines()] == [STEPS]
    run_log = sorted((out / "logs").glob("*.log"))[-1].read_text(errors="replace")
    assert (
        f"Resuming from {out / 'checkpoints' / f'global_step_{STEPS - 1}'}, setting global step to {STEPS - 1}"
        in run_log
    )
    assert not resume["left"] and "[sweep_job" in resume["log"]
    assert checked_in(resume["log"], out)


def test_convert_and_iterative_evaluation_jobs_on_the_run(cluster, run):
    ckpt, out = run["out"] / "checkpoints", run["out"]
    job = submit(
        cluster, "convert.sbatch", str(ckpt), sbatch=("--cpus-per-task=2", "--mem=4G"), name="convert"
    )
    log = wait_done(cluster, job, 600, "convert")
    for step in range(1, STEPS + 1):
        assert (out / "hf" / f"global_step_{step}" / ".converted.json").is_file(), log[-3000:]
    fixtures = REPO / "tests" / "fixtures" / "eval"
    args = [
        "--steps",
        str(STEPS),
        "--data-dir",
        str(fixtures),
        "--benchmarks",
        "arith",
        "--max-new-tokens",
        "16",
    ]
    args += ["--max-model-len", "512", "--no-progress"]
    job = submit(
        cluster,
        "eval_iterative.sbatch",
        str(ckpt),
        *args,
        sbatch=("--cpus-per-task=2", "--mem=4G", "--gpus-per-node=0"),
        name="eval",
    )
    log = wait_done(cluster, job, 900, "eval")
    summary = json.loads((out / "eval" / f"global_step_{STEPS}" / "summary.json").read_text())
    assert summary["complete"] and summary["settings"]["backend"] == "vllm", log[-3000:]
    assert f"| {STEPS} |" in (out / "eval" / "steps.md").read_text()


# ------------------------------------------------------------------------------- failures
def test_a_node_whose_ray_start_fails_ends_the_job_in_one_line(cluster, shm_not_ours):
    out = cluster["dir"] / "broken"
    before = shm_files()
    env_tmp = Path(cluster["env"]["RAY_TMPDIR"]) / "broken"
    env_tmp.mkdir()
    (env_tmp / "node2").write_text("not a folder: ray start on node2 cannot make its temp dir\n")
    started = time.monotonic()
    job = submit(
        {**cluster, "env": {**cluster["env"], "RAY_TMPDIR": str(env_tmp)}},
        "train.sbatch",
        *train_args(1),
        sbatch=("--nodes=2", *CPU_JOB),
        name="broken",
        env={"OUTPUT_DIR": str(out)},
    )
    log = wait_done(cluster, job, 180, "broken")
    assert time.monotonic() - started < 120, log[-3000:]
    assert exit_status(cluster, job) != 0
    assert "'ray start' on node node2 exited before the cluster was ready" in log, log[-3000:]
    assert "training on" not in log
    assert not leftovers(job, before, shm_not_ours)


# ------------------------------------------------ after the heavy phase: no Ray node starts
def test_resubmitting_a_finished_run_says_it_is_done(cluster, run):
    """Resubmitted the way a preset is (`python -m recipes.submit`): the same run, from its config's
    resources (2 nodes from trainer.nnodes, no GPU on platform=cpu, 24 h) and a CPU count of ours."""
    job = submit_preset(
        cluster,
        *train_args(STEPS),
        "trainer.nnodes=2",
        sbatch=("--cpus-per-task=2",),
        name="again",
        env={"OUTPUT_DIR": str(run["out"])},
    )
    log = wait_done(cluster, job, 300, "again")
    assert exit_status(cluster, job) == 0, log[-3000:]
    assert allocation(cluster, job) == {
        "JobName": "demo_cpu",
        "NumNodes": "2",
        "CPUs/Task": "2",
        "TimeLimit": "1-00:00:00",
    }
    assert f"done: already trained to step {STEPS}" in log
    # found in the preflight, in OUTPUT_DIR: no Ray node is started for a run with nothing to do
    assert "preflight: ok platform=cpu offline=1 done=1" in log and "no Ray cluster started" in log
    assert checked_in(log, run["out"]) and "ray start" not in log
    # and the default folder's run is as it was: no job of the module wrote there
    assert folder_state(cluster["default"]) == cluster["default_before"]


def test_a_bad_override_fails_before_any_ray_start(cluster):
    job = submit_preset(
        cluster,
        "experiment=demo_cpu",
        "trainer.total_training_steps=abc",
        "trainer.nnodes=2",
        "recipes.slurm.cpus_per_task=2",
        "recipes.slurm.time=0:10:00",
        name="bad",
    )
    log = wait_done(cluster, job, 180, "bad")
    assert "config error: trainer.total_training_steps='abc' must be an integer >= 1" in log, log[-3000:]
    assert "ray start" not in log and exit_status(cluster, job) == 2
    assert allocation(cluster, job) == {
        "JobName": "demo_cpu",
        "NumNodes": "2",
        "CPUs/Task": "2",
        "TimeLimit": "00:10:00",
    }
