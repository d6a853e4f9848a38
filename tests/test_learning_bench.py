"""scripts/bench/learning.py end to end on the tiny model (the benchmark itself runs SmolLM2 for
half an hour per method; this checks its plumbing): the held-out file, the step-0 evaluation,
eval.iterate over two checkpoints (the transformers backend here: 33 s against vLLM's 53 s),
summary.json, the table and the plot; a rerun generates nothing again. The training launch is the
session's reference run (tests/conftest.py: its checkpoints of steps 1 and 2 and its metrics are
copied in and the method marked trained, which learning.py then keeps as finished); the launch
learning.py would make for every method is checked before Ray by recipes.train's own checks, in
the second test. About 1 minute on 2 cores (20 held-out questions) after the reference run."""

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pyarrow.parquet as pq
import pytest

pytestmark = [pytest.mark.slow, pytest.mark.e2e, pytest.mark.timeout(1200)]

REPO = Path(__file__).resolve().parents[1]
SCRIPT = REPO / "scripts" / "bench" / "learning.py"


def bench(out: Path, cache: Path, *extra: str) -> subprocess.CompletedProcess:
    cmd = [sys.executable, str(SCRIPT), "--methods", "grpo", "--model", "tiny", "--steps", "2", *extra]
    cmd += ["--eval-every", "1", "--eval-backend", "hf", "--limit", "20", "--out", str(out)]
    env = {**os.environ, "RECIPES_CACHE": str(cache), "RAY_DEDUP_LOGS": "0"}
    return subprocess.run(cmd, cwd=REPO, env=env, capture_output=True, text=True, timeout=1100)


def trained_by_the_reference_run(e2e, run: Path) -> None:
    """`run` as learning.py leaves a trained method: checkpoints, metrics, train.done."""
    reference, _ = e2e.reference()
    e2e.copy_checkpoints(reference, run, upto=2)
    shutil.copytree(reference / "metrics", run / "metrics")
    (run / "train.done").write_text(json.dumps({"wall_s": 100.0}))


def test_learning_bench_on_two_steps_of_the_tiny_model(e2e, tmp_path):
    recipes_cache = e2e.cache
    out = tmp_path / "learning"
    trained_by_the_reference_run(e2e, out / "runs" / "grpo")
    proc = bench(out, recipes_cache)
    assert proc.returncode == 0, (proc.stdout[-3000:], proc.stderr[-3000:])

    # the held-out questions are the test split's first 20 (--limit), none of them a training question
    heldout = [json.loads(line) for line in (out / "heldout" / "toy_heldout.jsonl").read_text().splitlines()]
    train = pq.read_table(recipes_cache / "data" / "toy_arithmetic" / "train.parquet").to_pylist()
    test = pq.read_table(recipes_cache / "data" / "toy_arithmetic" / "test.parquet").to_pylist()
    assert [h["problem"] for h in heldout] == [r["prompt"][-1]["content"] for r in test[:20]]
    assert not {h["problem"] for h in heldout} & {r["prompt"][-1]["content"] for r in train}

    def acc(summary: Path) -> float:
        return json.loads(summary.read_text())["per_question_average"]["accuracy"]["mean"]

    initial = acc(out / "eval_step0" / "summary.json")
    steps = {s: acc(out / "runs" / "grpo" / "eval" / f"global_step_{s}" / "summary.json") for s in (1, 2)}
    s = json.loads((out / "summary.json").read_text())
    assert list(s) == ["grpo"]
    g = s["grpo"]
    assert g["initial_acc"] == initial and g["final_acc"] == steps[2]
    assert g["best_acc"] == max(initial, *steps.values())
    assert g["steps"] == 2 and g["heldout_n"] == 20 and g["wall_s"] > 0
    table = (out / "summary.md").read_text()
    assert f"| grpo | {100 * initial:.1f}% | {100 * steps[2]:.1f}% |" in table
    png = (out / "learning.png").read_bytes()
    assert png[:8] == b"\x89PNG\r\n\x1a\n" and len(png) > 10_000
    assert proc.stdout.strip().splitlines()[-1].startswith(f"done: {out}/summary.json")

    assert "grpo: training" not in proc.stdout  # trained already
    # a rerun keeps what is finished: no training launch, no generation
    again = bench(out, recipes_cache)
    assert again.returncode == 0, again.stderr[-3000:]
    assert "grpo: training" not in again.stdout
    rerun = json.loads((out / "summary.json").read_text())["grpo"]
    assert rerun["wall_s"] >= g["wall_s"]  # the rerun's own (short) evaluation time is added
    assert {k: v for k, v in rerun.items() if k != "wall_s"} == {k: v for k, v in g.items() if k != "wall_s"}
    eval_log = (out / "runs" / "grpo" / "eval.log").read_text()
    assert eval_log.count("already evaluated") >= 2

    # --report-only: the same numbers, nothing run (no eval.iterate, no training), a method not
    # yet trained left out
    eval_log_before = eval_log
    report = bench(out, recipes_cache, "--report-only", "--methods", "grpo,cw_grpo")
    assert report.returncode == 0, report.stderr[-3000:]
    assert "cw_grpo: not finished yet; left out" in report.stdout
    assert json.loads((out / "summary.json").read_text()) == {"grpo": rerun}
    assert (out / "runs" / "grpo" / "eval.log").read_text() == eval_log_before


@pytest.mark.parametrize("method", ["grpo", "prompt_aug", "ta_grpo", "cw_grpo", "prorl"])
def test_every_methods_training_launch_passes_the_checks_before_ray(method, tmp_path):
    """The overrides learning.py launches recipes.train with, for the benchmark's own model and
    steps: the config composes and passes ours and verl's checks."""
    import importlib.util

    from recipes.checks import check_config
    from recipes.train import compose

    spec = importlib.util.spec_from_file_location("learning", SCRIPT)
    learning = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(learning)
    overrides = learning.train_overrides(["experiment=learning_cpu"], method, 30, 10, tmp_path / method)
    cfg = compose(overrides)
    check_config(cfg)
    assert cfg.trainer.total_training_steps == 30 and cfg.trainer.save_freq == 10
    assert cfg.recipes.methods[method] and cfg.recipes.methods["grpo"]
