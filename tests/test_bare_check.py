"""scripts/gpu_bundle/bare_check.py without a GPU: its launches compose to what it says and pass
the checks a launch makes before Ray, its arguments are refused in one line, and its figures are
read from hand-written metrics and memory files. The launches themselves run in the bundle's
self-test (`make test-bundle`, docs/gpu.md)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from script_module import load_script

from recipes import checks
from recipes.settings import select
from recipes.train import compose

REPO = Path(__file__).resolve().parents[1]
SCRIPT = REPO / "scripts" / "gpu_bundle" / "bare_check.py"
bare = load_script(SCRIPT, "bare_check")


def test_the_memory_pass_is_one_gpus_share_of_the_first_gpu_run(tmp_path):
    cfg = compose([*bare.memory_overrides(tmp_path / "model", cpu=False), f"recipes.output_dir={tmp_path}"])
    assert select(cfg, "actor_rollout_ref.model.path") == str(tmp_path / "model")
    assert select(cfg, "actor_rollout_ref.rollout.name") == "hf"
    assert select(cfg, "recipes.platform") == "gpu"
    assert select(cfg, "data.train_batch_size") == 4  # 16 questions over the preset's 4 GPUs
    assert select(cfg, "trainer.n_gpus_per_node") == 1
    n = select(cfg, "actor_rollout_ref.rollout.n")
    assert bare.MEMORY_RESPONSES == 4 * n == 48
    assert select(cfg, "data.max_response_length") == 4096
    assert select(cfg, "actor_rollout_ref.actor.ppo_max_token_len_per_gpu") == 16384
    assert select(cfg, "actor_rollout_ref.actor.use_kl_loss")  # the reference pass is measured too
    assert select(cfg, "trainer.total_training_steps") == 1
    checks.validate(cfg)


@pytest.mark.parametrize("name", [n for n, _, _ in bare.LOOP])
@pytest.mark.parametrize("cpu", [False, True])
def test_every_loop_launch_composes_and_passes_the_checks(name, cpu, tmp_path):
    methods, extra = next((m, e) for n, m, e in bare.LOOP if n == name)
    cfg = compose([*bare.loop_overrides(methods, extra, cpu), f"recipes.output_dir={tmp_path}"])
    assert select(cfg, "recipes.platform") == ("cpu" if cpu else "gpu")
    assert set(select(cfg, "recipes.methods")) == set(methods.strip("[]").split(","))
    assert (
        select(cfg, "data.train_batch_size") * select(cfg, "actor_rollout_ref.rollout.n")
        == bare.LOOP_RESPONSES
    )
    assert select(cfg, "trainer.save_freq") == select(cfg, "trainer.total_training_steps") == bare.LOOP_STEPS
    checks.validate(cfg)


def test_the_four_together_force_a_prorl_reset_at_step_1(tmp_path):
    methods, extra = next((m, e) for n, m, e in bare.LOOP if n == "all four")
    cfg = compose([*bare.loop_overrides(methods, extra, cpu=False), f"recipes.output_dir={tmp_path}"])
    assert select(cfg, "recipes.prorl.reset_every") == 1
    assert select(cfg, "recipes.prorl.min_gap") == 1


@pytest.mark.parametrize(
    ("args", "said"),
    [
        (["--passes", "memory,warmup"], "--passes memory,warmup: a comma-separated list"),
        (["--launches", "grpo,ppo"], "--launches: unknown ppo"),
        (["--budget-s", "0"], "--budget-s 0.0: seconds, more than 0."),
    ],
)
def test_bad_arguments_are_one_line_and_exit_2(args, said, tmp_path):
    done = subprocess.run(
        [sys.executable, str(SCRIPT), "--out", str(tmp_path / "new"), *args], capture_output=True, text=True
    )
    assert done.returncode == 2
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith(f"bare check: {said}")
    assert not (tmp_path / "new").exists()


def test_an_out_folder_holding_files_is_refused_and_left_alone(tmp_path):
    (tmp_path / "notes.txt").write_text("mine")
    done = subprocess.run(
        [sys.executable, str(SCRIPT), "--out", str(tmp_path)], capture_output=True, text=True
    )
    assert done.returncode == 2
    assert "holds files already" in done.stderr
    assert [p.name for p in tmp_path.iterdir()] == ["notes.txt"]
    assert (tmp_path / "notes.txt").read_text() == "mine"


def test_figures_from_the_metrics_use_steps_2_on(tmp_path):
    metrics = tmp_path / "metrics"
    metrics.mkdir()
    steps = [
        {"timing_s/gen": 30.0, "timing_s/update_actor": 9.0, "timing_s/step": 50.0, "perf/throughput": 100.0},
        {"timing_s/gen": 10.0, "timing_s/update_actor": 4.0, "timing_s/step": 16.0, "perf/throughput": 300.0},
        {"timing_s/gen": 12.0, "timing_s/update_actor": 6.0, "timing_s/step": 20.0, "perf/throughput": 200.0},
    ]
    steps[-1].update({"response_length/mean": 50.0, "prorl/resets": 2.0, "template/formal/acc": 0.5})
    (metrics / "1.jsonl").write_text(
        "".join(json.dumps({"step": i, "data": d}) + "\n" for i, d in enumerate(steps))
    )
    got = bare.step_figures(tmp_path, responses=48)
    assert got["steps"] == 3
    assert got["seconds"] == {"generation": 11.0, "update": 5.0, "step": 18.0}  # medians of steps 2 and 3
    assert got["train_tokens_per_s"] == 200.0
    assert got["generated_tokens_per_s"] == 200.0  # 50 tokens x 48 responses / 12 s
    assert got["mechanisms"] == {"prorl/resets": 2.0, "templates drawn": 1}


def test_memory_by_phase_and_against_the_plan(tmp_path):
    gib = 2**30
    lines = [
        {
            "phase": "generation",
            "device": "cuda",
            "before": 4 * gib,
            "peak": 10 * gib,
            "reserved": 0,
            "rss": 1,
        },
        {
            "phase": "ref log-prob",
            "device": "cuda",
            "before": 20 * gib,
            "peak": 30 * gib,
            "reserved": 0,
            "rss": 1,
        },
        {"phase": "update", "device": "cuda", "before": 21 * gib, "peak": 36 * gib, "reserved": 0, "rss": 1},
        {"phase": "update", "device": "cuda", "before": 21 * gib, "peak": 38 * gib, "reserved": 0, "rss": 1},
    ]
    (tmp_path / "memory.jsonl").write_text("".join(json.dumps(x) + "\n" for x in lines))
    measured = bare.memory_figures(tmp_path)
    assert measured == {
        "generation": 10.0,
        "ref log-prob": 30.0,
        "update": 38.0,  # the larger of the two mini-batches
        "trainer held during generation": 20.0,  # allocated when the first trainer phase began
    }
    planned = {"update": 40.0, "log-prob": 24.0, "trainer held during generation": 20.0}
    assert bare.compare(measured, planned) == {
        "update": 0.95,
        "ref log-prob": 1.25,
        "trainer held during generation": 1.0,
    }


def test_the_table_keeps_a_failed_launch_and_its_reason(tmp_path):
    report = {
        "machine": {"device": "NVIDIA H200", "gpu_gib": 139.8, "python": "3.12.3", "torch": "2.11.0"}
        | {"verl": "0.9.1", "transformers": "5.9.0"},
        "budget_s": 480,
        "rows": [
            {"name": "dapo", "methods": "[dapo]", "status": "fail", "reason": "exit 1: a | b"},
            {"name": "memory", "methods": "[grpo]", "status": "pass", "memory_gib": {"update": 38.0}}
            | {"plan_gib": {"update": 40.0}, "figures": {"seconds": {"step": 90.0, "generation": 70.0}}},
        ],
    }
    bare.write_report(tmp_path, report)
    assert json.loads((tmp_path / "results.json").read_text()) == report
    table = (tmp_path / "table.md").read_text().splitlines()
    assert table[0].startswith("NVIDIA H200, 139.8 GiB; Python 3.12.3")
    assert table[4] == "| dapo | [dapo] | fail | - | - | - | - | exit 1: a / b |"
    assert table[5] == "| memory | [grpo] | pass | 90.0 (70.0, -, -, -) | - | update 38.0 / 40.0 | - |  |"
