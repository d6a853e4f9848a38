"""The GPU smoke run (scripts/gpu_smoke.sh, scripts/gpu_smoke.py) without a GPU: the presets it
finds against Hydra's own composition, its scaled-down overrides against recipes.train's checks,
the commands DRY_RUN=1 prints, the result lines and the table parsed from hand-written metrics
files, and the script run without DRY_RUN with the GPU programs (the driver check, training,
conversion, vLLM evaluation) replaced by a stand-in interpreter that writes what they would, the
tests named `..._with_stand_in_gpu_programs_...`. The smoke run itself has not run on a GPU
(docs/slurm.md)."""

import http.server
import json
import os
import re
import shlex
import shutil
import socket
import subprocess
import sys
import threading
from pathlib import Path

import pytest
from script_module import load_script  # tests/script_module.py

from recipes.checks import check_config
from recipes.train import compose

REPO = Path(__file__).resolve().parents[1]
SCRIPT = REPO / "scripts" / "gpu_smoke.sh"
SBATCH = REPO / "scripts" / "slurm" / "gpu_smoke.sbatch"
FIXTURES = Path(__file__).resolve().parent / "fixtures" / "gpu_smoke"
PREFIX = "[dry-run] "
EXPERIMENTS = sorted(p.stem for p in (REPO / "configs" / "experiment").glob("*.yaml"))


gs = load_script(REPO / "scripts" / "gpu_smoke.py")


@pytest.fixture(scope="module")
def composed() -> dict[str, dict]:
    """What Hydra composes for every preset: platform, model, data and methods."""
    out = {}
    for name in EXPERIMENTS:
        cfg = compose([f"experiment={name}"])
        out[name] = {
            "platform": cfg.recipes.platform,
            "model": cfg.recipes.model,
            "data": cfg.recipes.data,
            "methods": sorted(k for k, v in cfg.recipes.methods.items() if v),
        }
    return out


def _env(**extra: str) -> dict[str, str]:
    """No nvidia-smi, no Slurm, the test interpreter as `python`."""
    env = {"PATH": f"{Path(sys.executable).parent}:/usr/bin:/bin", "HOME": os.environ.get("HOME", "/tmp")}
    env.update(extra)
    return env


def _commands(stdout: str) -> list[list[str]]:
    """The printed commands, split as bash would, without a trailing `> LOG 2>&1`."""
    out = []
    for line in stdout.splitlines():
        if line.startswith(PREFIX) and not line.startswith(PREFIX + "#"):
            words = shlex.split(line[len(PREFIX) :])
            out.append(words[: words.index(">")] if ">" in words else words)
    return out


# ------------------------------------------------------------------------------ the presets
def test_presets_are_read_as_hydra_composes_them(composed):
    for name in EXPERIMENTS:
        c = gs.choices(name)
        assert {**c, "methods": sorted(c["methods"])} == composed[name], name


def test_every_non_cpu_preset_is_a_smoke_preset_and_no_cpu_one_is(composed):
    gpu = [n for n in EXPERIMENTS if composed[n]["platform"] != "cpu"]
    assert gs.gpu_presets() == gpu
    assert len(gpu) >= 12 and "demo_cpu" not in gpu and "learning_cpu" not in gpu


def test_every_hub_model_has_a_local_stand_in_that_fits_one_gpu():
    models = {p.stem for p in (REPO / "configs" / "model").glob("*.yaml")}
    assert models - set(gs.LOCAL_MODELS) == set(gs.STAND_INS)
    for model, (folder, hub) in gs.STAND_INS.items():
        assert hub.endswith("/" + folder)
        # the parameter count in the name: no stand-in above 2B
        size = re.search(r"-(\d+(?:\.\d+)?)B(?:-|$)", folder)
        assert size and float(size.group(1)) <= 2, (model, folder)
    # a model that fits is its own stand-in
    assert gs.STAND_INS["qwen2_5_math_1_5b"][0] == "Qwen2.5-Math-1.5B"
    assert gs.STAND_INS["qwen3_4b"][0] == "Qwen3-1.7B"


@pytest.mark.parametrize("gpus", [1, 2, 3, 4, 5, 6, 7, 8])
def test_batch_size_divides_over_every_gpu_count(gpus):
    b = gs.batch_size(gpus)
    assert b >= 4 and b % gpus == 0 and (b * gs.ROLLOUT_N) % gpus == 0
    assert (b * gs.ROLLOUT_N // gpus) % gs.ROLLOUT_N == 0  # micro-batch = rollout.n divides each share


def _check_smoke_configs(gpus: int, tmp_path: Path) -> None:
    for p in gs.plan(tmp_path / "models", tmp_path / "data", tmp_path / "out", gpus, "sdpa"):
        cfg = compose(p.overrides)
        check_config(cfg)  # ours and verl's checks, as recipes.train runs them before Ray
        assert cfg.trainer.n_gpus_per_node == gpus and cfg.trainer.total_training_steps == 2
        assert cfg.data.max_response_length == gs.RESPONSE_TOKENS
        assert cfg.actor_rollout_ref.model.path == str(tmp_path / "models" / gs.STAND_INS[p.model][0])
        assert cfg.data.train_files.startswith(str(tmp_path / "data"))
        if "prorl" in cfg.recipes.methods:
            assert cfg.recipes.prorl.reset_every == 1
        n = cfg.actor_rollout_ref.rollout.n
        if cfg.recipes.methods.get("ta_grpo"):  # 2 responses to each variant, the preset's variants
            assert n == max(gs.ROLLOUT_N, 2 * (cfg.recipes.ta_grpo.n_rephrasings + 1)), p.preset
        else:
            assert n == gs.ROLLOUT_N, p.preset


def test_smoke_overrides_pass_recipes_train_checks_on_3_gpus(tmp_path):
    _check_smoke_configs(3, tmp_path)


@pytest.mark.slow  # 12 compositions each; batch_size's arithmetic is checked for 1-8 above
@pytest.mark.parametrize("gpus", [1, 8])
def test_smoke_overrides_pass_recipes_train_checks_on_any_gpu_count(gpus, tmp_path):
    _check_smoke_configs(gpus, tmp_path)


# ------------------------------------------------------------------------------ dry run
def test_dry_run_lists_every_gpu_preset_with_the_smoke_overrides(composed, tmp_path):
    gpu = [n for n in EXPERIMENTS if composed[n]["platform"] != "cpu"]
    models, data, out = tmp_path / "no-models", tmp_path / "no-data", tmp_path / "out"
    proc = subprocess.run(
        ["bash", str(SCRIPT), str(models), str(data), str(out)],
        env=_env(DRY_RUN="1", GPUS="3"),
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.returncode == 0, proc.stderr
    assert not out.exists()  # a dry run creates nothing
    # the GPU count's old name still works, and says its new one
    assert (
        "GPUS is now GPUS_PER_NODE (as in train.sbatch); the old name goes in the next release" in proc.stdout
    )
    cmds = _commands(proc.stdout)
    trains = [c for c in cmds if "recipes.train" in c]
    listed = [next(a.split("=", 1)[1] for a in c if a.startswith("experiment=")) for c in trains]
    assert listed == gpu
    for name, cmd in zip(listed, trains, strict=True):
        args = cmd[cmd.index("recipes.train") + 1 :]
        assert cmd[:5] == ["timeout", "--signal=TERM", "--kill-after=60", "1800", "python"]
        for expected in (
            "platform=gpu",
            "trainer.n_gpus_per_node=3",
            "trainer.total_training_steps=2",
            "data.train_batch_size=6",
            "actor_rollout_ref.actor.ppo_mini_batch_size=6",
            f"actor_rollout_ref.rollout.n={gs.rollout_n(name)}",
            f"data.max_response_length={gs.RESPONSE_TOKENS}",
            f"actor_rollout_ref.model.path={models / gs.STAND_INS[composed[name]['model']][0]}",
            f"data.train_files={data / composed[name]['data'] / 'train.parquet'}",
            f"recipes.output_dir={out / name / 'run'}",
            "recipes.attention=auto",  # recipes.train falls back to sdpa without flash-attn
        ):
            assert expected in args, (name, expected)
        # the missing folders are announced, not fatal, in a dry run
        assert f"# {name}: no model at {models}" in proc.stdout
    converts = [c for c in cmds if "eval.convert" in c]
    evals = [c for c in cmds if "eval.run" in c]
    assert len(converts) == len(evals) == len(gpu)
    for name, conv, ev in zip(gpu, converts, evals, strict=True):
        assert conv[conv.index("eval.convert") + 1 :] == [
            str(out / name / "run" / "checkpoints"),
            "--steps",
            "2",
            "--hf-root",
            str(out / name / "hf"),
        ]
        assert ev[ev.index("--model") + 1] == str(out / name / "hf" / "global_step_2")
        assert ev[ev.index("--backend") + 1] == "vllm"
        assert ev[ev.index("--data-dir") + 1] == str(out / name / "questions")
    assert _commands(proc.stdout)[-1][-2:] == ["table", str(out / "results.jsonl")]


def _caches(tmp_path: Path, endpoint: str = "") -> dict[str, str]:
    """HF_HOME and RECIPES_CACHE in the test's folder; the Hub at `endpoint`, else a closed port
    (a node without network)."""
    if not endpoint:
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            endpoint = f"http://127.0.0.1:{s.getsockname()[1]}"
    return {
        "HF_HOME": str(tmp_path / "hf"),
        "RECIPES_CACHE": str(tmp_path / "cache"),
        "HF_ENDPOINT": endpoint,
    }


def hf_snapshot(hub: Path, repo_id: str) -> Path:
    """A whole model in a Hugging Face hub cache, laid out as huggingface_hub lays it out (tiny
    files: the layout is what is read)."""
    commit = "0" * 40
    snapshot = hub / ("models--" + repo_id.replace("/", "--")) / "snapshots" / commit
    snapshot.mkdir(parents=True)
    (snapshot.parents[1] / "refs").mkdir()
    (snapshot.parents[1] / "refs" / "main").write_text(commit)
    for name in ("config.json", "tokenizer_config.json", "model.safetensors"):
        (snapshot / name).write_text("{}")
    return snapshot


def test_a_bare_dry_run_reads_the_caches_and_needs_no_nvidia_smi_and_defaults_to_one_gpu(composed, tmp_path):
    """Without folders: every stand-in by its hub id (the Hugging Face cache), every dataset under
    $RECIPES_CACHE/data. The caches are empty and the Hub unreachable: each preset is named as one
    a real run skips, with what to fetch."""
    gpu = [n for n in EXPERIMENTS if composed[n]["platform"] != "cpu"]
    env = _env(DRY_RUN="1", **_caches(tmp_path))
    proc = subprocess.run(
        ["bash", str(SCRIPT)], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=60
    )
    assert proc.returncode == 0, proc.stderr
    assert "no nvidia-smi here: GPUS_PER_NODE=1" in proc.stdout
    assert (
        f"models from the Hugging Face cache (HF_HOME={tmp_path / 'hf'}), data from {tmp_path / 'cache' / 'data'}"
        in proc.stdout
    )
    trains = [c for c in _commands(proc.stdout) if "recipes.train" in c]
    assert [c[c.index("recipes.train") + 1] for c in trains] == [f"experiment={n}" for n in gpu]
    for name, cmd in zip(gpu, trains, strict=True):
        assert "trainer.n_gpus_per_node=1" in cmd and "data.train_batch_size=4" in cmd
        hub = gs.STAND_INS[composed[name]["model"]][1]
        assert f"actor_rollout_ref.model.path={hub}" in cmd
        train = next(a.split("=", 1)[1] for a in cmd if a.startswith("data.train_files="))
        assert Path(train).parent.parent == tmp_path / "cache" / "data"
        assert f"# {name}: " in proc.stdout and f"hf download {hub}" in proc.stdout
    assert "(a real run skips this preset)" in proc.stdout
    assert sorted(p.name for p in tmp_path.iterdir()) == []  # nothing written, the caches not made


def test_the_smoke_run_and_a_presets_sbatch_read_the_same_model_and_data_from_the_same_variables(tmp_path):
    """HF_HOME and RECIPES_CACHE are the one place: with DeepSeek-R1-Distill-Qwen-1.5B cached whole
    and Open-RS prepared, the smoke run's plan for cw_grpo_open_rs and the question its job asks
    before Ray (`python -m recipes.submit experiment=cw_grpo_open_rs` submits train.sbatch with the
    preset: its printed `recipes.offline` command, run here) give the same line: offline, the same
    snapshot, the same files."""
    from recipes.tools.data import write_toy_arithmetic

    write_toy_arithmetic(tmp_path / "cache" / "data" / "open_rs", n_train=8, n_test=4, seed=0)
    snap = hf_snapshot(tmp_path / "hf" / "hub", "deepseek-ai/DeepSeek-R1-Distill-Qwen-1.5B")
    env = _env(DRY_RUN="1", **_caches(tmp_path))
    smoke = subprocess.run(
        ["bash", str(SCRIPT)],
        cwd=tmp_path,
        env={**env, "PRESETS": "cw_grpo_open_rs"},
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert smoke.returncode == 0, smoke.stderr
    said = [ln for ln in smoke.stdout.splitlines() if ln.startswith(PREFIX + "# cw_grpo_open_rs: ")]
    assert len(said) == 1 and "skips" not in said[0]
    smoke_line = said[0].removeprefix(PREFIX + "# cw_grpo_open_rs: ")
    assert smoke_line.startswith("offline: ") and str(snap) in smoke_line
    sbatch = subprocess.run(
        ["bash", str(REPO / "scripts" / "slurm" / "train.sbatch"), "experiment=cw_grpo_open_rs"],
        cwd=tmp_path,
        env={**env, "GPUS_PER_NODE": "4"},  # as recipes.submit passes it
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert sbatch.returncode == 0, sbatch.stderr
    (asked,) = [c for c in _commands(sbatch.stdout) if c[1:3] == ["-m", "recipes.offline"]]
    assert "experiment=cw_grpo_open_rs" in asked
    env.pop("DRY_RUN")
    answer = subprocess.run(
        [sys.executable, *asked[1:]], cwd=REPO, env=env, capture_output=True, text=True, timeout=60
    )
    assert answer.returncode == 0, answer.stderr
    assert answer.stdout == smoke_line + "\n"


def test_downloads_lists_what_the_caches_lack_for_the_presets_and_their_stand_ins(tmp_path, monkeypatch):
    """In this process the hub cache's location is huggingface_hub's constant (read from HF_HOME
    when it was imported): set to the test's folder, as HF_HOME would set it in a fresh process."""
    from huggingface_hub import constants

    from recipes.tools.data import write_toy_arithmetic

    data = tmp_path / "cache" / "data"
    write_toy_arithmetic(data / "open_rs", n_train=8, n_test=4, seed=0)
    snap = hf_snapshot(tmp_path / "hf" / "hub", "deepseek-ai/DeepSeek-R1-Distill-Qwen-1.5B")
    monkeypatch.setattr(constants, "HF_HUB_CACHE", str(tmp_path / "hf" / "hub"))
    monkeypatch.setenv("RECIPES_CACHE", str(tmp_path / "cache"))
    assert gs.cache_downloads(["cw_grpo_open_rs", "cw_grpo_open_rs_7b"]) == [
        f"# models into the Hugging Face cache {tmp_path / 'hf' / 'hub'}, data into {data}",
        "hf download Qwen/Qwen2.5-Math-1.5B-Instruct",  # the 7B preset's stand-in
        "hf download Qwen/Qwen2.5-Math-7B-Instruct",  # what its sbatch trains
        f"# cached: deepseek-ai/DeepSeek-R1-Distill-Qwen-1.5B ({snap})",
        f"# ready: {data / 'open_rs'}",
    ]
    smoke = gs.cache_downloads(smoke_only=True)  # every GPU preset, the smoke run's models only
    assert "hf download Qwen/Qwen2.5-Math-7B-Instruct" not in smoke
    assert "hf download Qwen/Qwen2.5-Math-1.5B-Instruct" in smoke and "hf download Qwen/Qwen3-1.7B" in smoke
    assert f"python -m recipes.tools.data prepare deepscaler --out {data / 'deepscaler'}" in smoke
    # the command line, in a fresh process that finds the caches from HF_HOME and RECIPES_CACHE
    proc = subprocess.run(
        [sys.executable, str(REPO / "scripts" / "gpu_smoke.py"), "downloads", "--presets", "cw_grpo_open_rs"],
        env=_env(**_caches(tmp_path)),
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.splitlines()[1:] == [
        f"# cached: deepseek-ai/DeepSeek-R1-Distill-Qwen-1.5B ({snap})",
        f"# ready: {data / 'open_rs'}",
    ]
    # the older form is unchanged: folders of your own
    old = gs.downloads(tmp_path / "m", tmp_path / "d")
    assert f"hf download Qwen/Qwen3-1.7B --local-dir {tmp_path / 'm' / 'Qwen3-1.7B'}" in old


def test_the_sbatch_wrapper_activates_and_hands_over_absolute_folders(tmp_path):
    proc = subprocess.run(
        ["bash", str(SBATCH), "models", "data"],
        cwd=tmp_path,
        env=_env(DRY_RUN="1", VENV="/opt/envs/smoke", SLURM_GPUS_ON_NODE="2", PRESETS="ta_grpo_math"),
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.returncode == 0, proc.stderr
    cmds = _commands(proc.stdout)
    assert cmds[0] == ["source", "/opt/envs/smoke/bin/activate"] and cmds[1] == ["cd", str(REPO)]
    train = next(c for c in cmds if "recipes.train" in c)
    assert "trainer.n_gpus_per_node=2" in train
    assert f"actor_rollout_ref.model.path={tmp_path / 'models' / 'Qwen3-1.7B'}" in train


def test_the_sbatch_wrapper_says_how_and_refuses_to_run_outside_slurm(tmp_path):
    header = SBATCH.read_text().split("#SBATCH", 1)[0]
    for needed in ("sbatch scripts/slurm/gpu_smoke.sbatch", "DRY_RUN=1 bash scripts/slurm/gpu_smoke.sbatch"):
        assert needed in header
    for section in ("What it does", "Hardware:", "Writes:", "Environment variables"):
        assert section in header, section
    proc = subprocess.run(
        ["bash", str(SBATCH), str(tmp_path), str(tmp_path)],
        env=_env(),
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.returncode == 2 and "not inside a Slurm job" in proc.stderr
    assert len(proc.stderr.strip().splitlines()) == 1 and proc.stdout == ""


@pytest.mark.parametrize(
    ("env", "args", "words"),
    [
        ({}, ["only-one"], "usage"),
        ({"GPUS_PER_NODE": "0", "DRY_RUN": "1"}, ["m", "d"], "GPUS_PER_NODE must be a positive integer"),
        ({"GPUS_PER_NODE": "9", "DRY_RUN": "1"}, ["m", "d"], None),  # capped at 8 with a note
        ({"ATTN": "xformers", "DRY_RUN": "1"}, ["m", "d"], "ATTN must be"),
        (
            {"PRESETS": "demo_cpu", "GPUS_PER_NODE": "1", "DRY_RUN": "1"},
            ["m", "d"],
            "not a GPU preset: demo_cpu",
        ),
        (
            {"GPUS_PER_NODE": "1"},
            ["/nonexistent/models", "d"],
            "MODELS_DIR '/nonexistent/models' is not a folder",
        ),
    ],
)
def test_bad_input_is_one_line_and_exit_2(env, args, words):
    proc = subprocess.run(
        ["bash", str(SCRIPT), *args], env=_env(**env), capture_output=True, text=True, timeout=60
    )
    if words is None:
        assert proc.returncode == 0 and "the smoke run uses 8" in proc.stdout
        assert all("trainer.n_gpus_per_node=8" in c for c in _commands(proc.stdout) if "recipes.train" in c)
        return
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert len(proc.stderr.strip().splitlines()) == 1 and words in proc.stderr
    assert "Traceback" not in proc.stderr


# ------------------------------------------------------------------------------ results and table
def test_a_passing_run_is_parsed_from_its_newest_metrics_file():
    r = gs.judge(
        "p",
        FIXTURES / "pass" / "run",
        train_rc=0,
        convert_rc=0,
        eval_rc=0,
        eval_dir=FIXTURES / "pass" / "eval",
        gpu_log=FIXTURES / "pass" / "gpu_memory.csv",
    )
    assert r.status == "pass" and r.reason == "" and r.steps == 2
    assert r.step_s == pytest.approx(24.0)  # 30.0 s less the 6.0 s checkpoint of step 2
    assert r.tokens_per_s == pytest.approx(1500.0)  # 36,000 tokens / 24 s
    assert r.actor_gib == pytest.approx(22.75)  # the larger of the two steps (not the older file's 99)
    assert r.peak_gib == pytest.approx(40.0)  # 40,960 MiB on GPU 1
    assert r.eval_acc == pytest.approx(0.375)
    assert gs.line(r) == (
        "p: PASS  24.0 s/step  peak 40.0 GiB  plan - GiB  actor 22.8 GiB  1500 tokens/s  eval 37.5%"
    )


def test_the_plans_estimate_stands_beside_the_measured_peak(tmp_path):
    """recipes.plan on the run's own resolved config (what recipes.train saves as config.yaml), for
    the GPU's memory given, against the peak worked out here by hand: cw_grpo_open_rs on 4 GPUs of
    139.8 GiB peaks while it generates (its training phase, with vLLM asleep, plans ~31 GiB)."""
    from omegaconf import OmegaConf

    run = tmp_path / "run"
    shutil.copytree(FIXTURES / "pass" / "run", run)
    cfg = compose(["experiment=cw_grpo_open_rs"])
    OmegaConf.save(cfg, run / "config.yaml", resolve=True)
    r = gs.judge("p", run, train_rc=0, convert_rc=0, eval_rc=0, gpu_gib=139.8)
    # DeepSeek-R1-Distill-Qwen-1.5B's config.json: hidden 1,536, 28 layers, query 1,536 wide and
    # key/value 2 heads x 128 with biases, MLP 8,960, vocabulary 151,936, embeddings and LM head
    # untied; two norms a layer and a final one. The Hub's safetensors count: 1,777,088,000
    h, kv, mlp, vocab = 1536, 2 * 128, 8960, 151936
    layer = (h * h + h) + 2 * (h * kv + kv) + h * h + 3 * h * mlp + 2 * h
    params = 2 * vocab * h + 28 * layer + h
    assert params == 1_777_088_000
    # generating: the actor's fp32 parameters and Adam's two fp32 moments stay on the GPU (12 bytes
    # a parameter, sharded over 4), vLLM holds its gpu_memory_utilization 0.6 of the 139.8 GiB, and
    # the CUDA context takes 1 GiB
    peak = 12 * params / 4 / 2**30 + 0.6 * 139.8 + 1.0
    assert r.plan_gib == pytest.approx(peak, rel=1e-9) and round(peak, 1) == 89.8
    assert "peak - GiB  plan 89.8 GiB  actor" in gs.line(r)
    assert "| - | 89.8 |" in gs.table([r])


def test_a_failed_run_without_metrics_fails_with_the_reason():
    run = FIXTURES / "no_metrics" / "run"
    r = gs.judge("f", run, train_rc=1)
    assert (r.status, r.reason, r.steps, r.step_s, r.actor_gib) == (
        "fail",
        "training exited 1",
        0,
        None,
        None,
    )
    # exit status 0 and still no metrics: a failure too, never a pass
    r = gs.judge("f", run, train_rc=0, convert_rc=0, eval_rc=0)
    assert r.status == "fail" and r.reason.startswith("no metrics in")
    assert gs.line(r).startswith("f: FAIL  - s/step  peak - GiB")


def test_a_missing_metric_is_a_dash_not_a_failure():
    r = gs.judge("m", FIXTURES / "missing_metric" / "run", train_rc=0, convert_rc=0, eval_rc=0)
    assert r.status == "pass" and r.step_s == pytest.approx(20.0) and r.actor_gib == pytest.approx(19.0)
    assert r.tokens_per_s is None and r.peak_gib is None and r.eval_acc is None
    assert "  - tokens/s" in gs.line(r)


def test_a_run_that_stopped_after_one_step_fails():
    r = gs.judge("c", FIXTURES / "crashed" / "run", train_rc=0, convert_rc=0, eval_rc=0)
    assert (r.status, r.reason, r.steps) == ("fail", "training logged 1 of 2 steps", 1)
    assert r.step_s == pytest.approx(50.0)  # the cut-off second line is ignored


@pytest.mark.parametrize(
    ("rcs", "reason"),
    [
        ((0, 1, None), "conversion exited 1"),
        ((0, 0, 3), "evaluation exited 3"),
        ((124, None, None), "training exited 124"),
    ],
)
def test_the_first_failing_stage_is_the_reason(rcs, reason):
    train, conv, ev = rcs
    r = gs.judge("x", FIXTURES / "pass" / "run", train_rc=train, convert_rc=conv, eval_rc=ev)
    assert (r.status, r.reason) == ("fail", reason)


def test_the_cli_appends_results_and_the_table_exits_1_unless_all_passed(tmp_path):
    results = tmp_path / "results.jsonl"
    script = str(REPO / "scripts" / "gpu_smoke.py")

    def result(*args):
        return subprocess.run(
            [sys.executable, script, "result", "--results", str(results), *map(str, args)],
            capture_output=True,
            text=True,
            check=True,
        ).stdout.strip()

    passed = result(
        "--preset", "a", "--run-dir", FIXTURES / "pass" / "run", "--train-rc", "0", "--convert-rc", "0",
        "--eval-rc", "0", "--eval-dir", FIXTURES / "pass" / "eval", "--gpu-log", FIXTURES / "pass" / "gpu_memory.csv",
    )  # fmt: skip
    assert passed.startswith("a: PASS  24.0 s/step")
    table = subprocess.run([sys.executable, script, "table", str(results)], capture_output=True, text=True)
    assert table.returncode == 0
    assert "| a | pass | 24.0 | 40.0 | - | 22.8 | 1500 | 37.5% |  |" in table.stdout
    assert "1 passed, 0 failed, 0 skipped of 1 presets" in table.stdout

    failed = result(
        "--preset", "b", "--run-dir", FIXTURES / "no_metrics" / "run", "--train-rc", "1", "--convert-rc", "-"
    )
    assert failed.startswith("b: FAIL") and failed.endswith("(training exited 1)")
    result("--preset", "c", "--run-dir", tmp_path, "--skip", "no model at /m/X")
    table = subprocess.run([sys.executable, script, "table", str(results)], capture_output=True, text=True)
    assert table.returncode == 1
    rows = [ln for ln in table.stdout.splitlines() if ln.startswith("| ") and not ln.startswith("| preset")]
    assert [r.split(" | ")[:2] for r in rows] == [["| a", "pass"], ["| b", "fail"], ["| c", "skip"]]
    assert rows[2].endswith("| no model at /m/X |")
    assert "1 passed, 1 failed, 1 skipped of 3 presets" in table.stdout


# ---------------------------------------------- the script's own path, stand-in GPU programs
FAKE_PYTHON = """#!{python}
# stands in for the GPU programs gpu_smoke.sh runs; anything else goes to the real interpreter
import json, os, shutil, sys
args = sys.argv[1:]
with open(os.environ["FAKE_LOG"], "a") as f:
    f.write(json.dumps(args) + "\\n")
if args[:2] == ["-m", "recipes.train"] and os.environ.get("FAKE_HUB_LOG"):
    with open(os.environ["FAKE_HUB_LOG"], "a") as f:
        f.write(f"{{args[2]}} {{os.environ.get('HF_HUB_OFFLINE', 'unset')}} {{os.environ.get('HF_DATASETS_OFFLINE')}}\\n")
def value(flag):
    return args[args.index(flag) + 1]
if args[:2] == ["-m", "recipes.platforms.gpu"]:
    print("driver: NVIDIA 580.65.06 (R580+ needed for CUDA 13.0): ok")
elif args[:2] == ["-m", "recipes.train"]:
    opts = dict(a.split("=", 1) for a in args[2:] if "=" in a)
    if opts["experiment"] == os.environ.get("FAKE_FAIL"):
        print("Traceback: out of memory", file=sys.stderr)
        sys.exit(1)
    os.makedirs(opts["recipes.output_dir"] + "/metrics")
    shutil.copy(os.environ["FAKE_METRICS"], opts["recipes.output_dir"] + "/metrics/20260301-100000.jsonl")
elif args[:2] == ["-m", "eval.convert"]:
    os.makedirs(value("--hf-root") + "/global_step_2")
elif args[:2] == ["-m", "eval.run"]:
    os.makedirs(value("--out"))
    with open(value("--data-dir") + "/smoke.jsonl") as f:
        n = sum(1 for _ in f)
    with open(value("--out") + "/summary.json", "w") as f:
        json.dump({{"per_question_average": {{"accuracy": {{"mean": 1 / n}}}}}}, f)
else:
    os.execv(sys.executable, [sys.executable, *args])
"""


def test_the_script_with_stand_in_gpu_programs_runs_each_preset_judges_it_and_prints_the_table(tmp_path):
    """Stand-ins: the driver check, recipes.train, eval.convert and eval.run (they need a GPU, verl's
    GPU build and vLLM, which cannot run here) are one stand-in interpreter (FAKE_PYTHON) that
    writes what each would: a metrics file, an HF folder, a summary. Everything else (gpu_smoke.sh,
    gpu_smoke.py's plan, judge and table, the question file) is the real code."""
    from recipes.tools.data import write_toy_arithmetic

    fake = tmp_path / "python"
    fake.write_text(FAKE_PYTHON.format(python=sys.executable))
    fake.chmod(0o755)
    models, data, out = tmp_path / "models", tmp_path / "data", tmp_path / "out"
    (models / "DeepSeek-R1-Distill-Qwen-1.5B").mkdir(parents=True)
    (models / "DeepSeek-R1-Distill-Qwen-1.5B" / "config.json").write_text("{}")
    for name in ("open_rs", "deepscaler"):
        write_toy_arithmetic(data / name, n_train=20, n_test=12, seed=0)
    presets = "cw_grpo_open_rs,prorl_deepseek_r1_distill_qwen_1_5b,prompt_aug_qwen2_5_math_1_5b"
    proc = subprocess.run(
        ["bash", str(SCRIPT), str(models), str(data), str(out)],
        env=_env(
            PYTHON=str(fake),
            GPUS_PER_NODE="2",
            PRESETS=presets,
            FAKE_LOG=str(tmp_path / "calls.jsonl"),
            FAKE_FAIL="prorl_deepseek_r1_distill_qwen_1_5b",
            FAKE_METRICS=str(FIXTURES / "pass" / "run" / "metrics" / "20260301-100000.jsonl"),
        ),
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 1, proc.stdout + proc.stderr  # not every preset passed
    assert (
        "cw_grpo_open_rs: PASS  24.0 s/step  peak - GiB  plan - GiB  actor 22.8 GiB  1500 tokens/s  eval 12.5%"
        in proc.stdout
    )
    assert "prorl_deepseek_r1_distill_qwen_1_5b: FAIL" in proc.stdout and "(training exited 1)" in proc.stdout
    # the missing Qwen2.5-Math-1.5B folder and math_l3to5 data: one line, the preset skipped
    assert "prompt_aug_qwen2_5_math_1_5b: SKIP: no model at" in proc.stderr
    assert "1 passed, 1 failed, 1 skipped of 3 presets" in proc.stdout
    assert (out / "table.md").read_text() in proc.stdout
    calls = [json.loads(ln) for ln in (tmp_path / "calls.jsonl").read_text().splitlines()]
    modules = [c[1] for c in calls if c[0] == "-m"]
    # the failed training is neither converted nor evaluated; the skipped preset runs nothing
    # the driver check first, once
    assert modules == ["recipes.platforms.gpu", "recipes.train", "eval.convert", "eval.run", "recipes.train"]
    assert proc.stdout.startswith("driver: NVIDIA 580.65.06 (R580+ needed for CUDA 13.0): ok\n")
    questions = (out / "cw_grpo_open_rs" / "questions" / "smoke.jsonl").read_text().splitlines()
    assert len(questions) == gs.EVAL_QUESTIONS and set(json.loads(questions[0])) == {"problem", "answer"}
    assert (
        "Traceback: out of memory" in (out / "prorl_deepseek_r1_distill_qwen_1_5b" / "train.log").read_text()
    )


@pytest.fixture
def hub_server():
    """A local HTTP server standing where the Hub would be (HF_ENDPOINT): any answer (here 501)
    means the node reaches the Hub."""
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), http.server.BaseHTTPRequestHandler)
    threading.Thread(target=server.serve_forever, args=(0.05,), daemon=True).start()
    yield f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()
    server.server_close()


def test_the_script_with_stand_in_gpu_programs_is_offline_per_preset_when_all_it_reads_is_cached(
    tmp_path, hub_server
):
    """Stand-ins: the GPU programs, as above (FAKE_PYTHON), and a local HTTP server as the Hub;
    gpu_smoke.sh and the offline question it asks (recipes.offline, on real caches) are real. No folders: cw_grpo_open_rs's model is cached whole, so it trains with HF_HUB_OFFLINE=1;
    prompt_aug's Qwen2.5-Math-1.5B is not, and the Hub answers, so it trains with HF_HUB_OFFLINE
    unset, said in one line naming what it downloads. The data are local: HF_DATASETS_OFFLINE=1."""
    from recipes.tools.data import write_toy_arithmetic

    fake = tmp_path / "python"
    fake.write_text(FAKE_PYTHON.format(python=sys.executable))
    fake.chmod(0o755)
    for name in ("open_rs", "math_l3to5"):
        write_toy_arithmetic(tmp_path / "cache" / "data" / name, n_train=20, n_test=12, seed=0)
    hf_snapshot(tmp_path / "hf" / "hub", "deepseek-ai/DeepSeek-R1-Distill-Qwen-1.5B")
    proc = subprocess.run(
        ["bash", str(SCRIPT)],
        cwd=tmp_path,
        env=_env(
            PYTHON=str(fake),
            GPUS_PER_NODE="1",
            PRESETS="cw_grpo_open_rs,prompt_aug_qwen2_5_math_1_5b",
            OUT_DIR=str(tmp_path / "out"),
            FAKE_LOG=str(tmp_path / "calls.jsonl"),
            FAKE_HUB_LOG=str(tmp_path / "hub.log"),
            FAKE_METRICS=str(FIXTURES / "pass" / "run" / "metrics" / "20260301-100000.jsonl"),
            **_caches(tmp_path, hub_server),
        ),
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "2 passed, 0 failed, 0 skipped of 2 presets" in proc.stdout
    assert (tmp_path / "hub.log").read_text().splitlines() == [
        "experiment=cw_grpo_open_rs 1 1",
        "experiment=prompt_aug_qwen2_5_math_1_5b unset 1",
    ]
    assert (
        f"prompt_aug_qwen2_5_math_1_5b: online: Qwen/Qwen2.5-Math-1.5B not in the Hugging Face cache "
        f"({tmp_path / 'hf' / 'hub'}), so the run downloads it from {hub_server}" in proc.stderr
    )
    assert "cw_grpo_open_rs: offline: everything the run reads is here" in proc.stderr
    trains = [json.loads(ln) for ln in (tmp_path / "calls.jsonl").read_text().splitlines()]
    trains = [c for c in trains if c[:2] == ["-m", "recipes.train"]]
    assert "actor_rollout_ref.model.path=Qwen/Qwen2.5-Math-1.5B" in trains[1]
    assert f"data.train_files={tmp_path / 'cache' / 'data' / 'math_l3to5' / 'train.parquet'}" in trains[1]
