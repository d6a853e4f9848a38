"""End to end through verl's real trainer on the CPU (`python -m recipes.train`, Ray, FSDP2, the
hf_cpu rollout server, our grader in verl's reward loop), for each baseline: 2 steps, then a
resumed run to step 3. About a minute per run on 2 cores, most of it Ray and model start-up.

Skip locally with `make test-fast` (or `-m "not e2e"`).
"""

import json
import math
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file

pytestmark = [pytest.mark.slow, pytest.mark.e2e]

REPO = Path(__file__).resolve().parent.parent
RUN_TIMEOUT_S = 480


@pytest.fixture(scope="module")
def cache(tmp_path_factory):
    """One model/data cache for all runs (the first run builds the tiny model and the data)."""
    return tmp_path_factory.mktemp("recipes_cache")


def train(cache: Path, out: Path, method: str, steps: int, *extra: str) -> subprocess.CompletedProcess:
    args = [
        "experiment=demo_cpu",
        f"method=[{method}]",
        f"trainer.total_training_steps={steps}",
        "trainer.save_freq=1",
        f"recipes.output_dir={out}",
        f"trainer.rollout_data_dir={out}/rollouts",
        "actor_rollout_ref.actor.checkpoint.save_contents=[model,optimizer,extra,hf_model]",
        *extra,
    ]
    env = {**os.environ, "RECIPES_CACHE": str(cache), "RAY_DEDUP_LOGS": "0"}
    proc = subprocess.run(
        [sys.executable, "-m", "recipes.train", *args],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=RUN_TIMEOUT_S,
    )
    assert proc.returncode == 0, (proc.stdout[-3000:], proc.stderr[-6000:])
    return proc


def metrics_of(out: Path) -> list[dict]:
    """Step records of every launch in `out`, oldest launch first."""
    records = []
    for f in sorted((out / "metrics").glob("*.jsonl")):
        records += [json.loads(line) for line in f.read_text().splitlines()]
    return records


def prompts_at(out: Path, step: int) -> list[str]:
    rows = [json.loads(line) for line in (out / "rollouts" / f"{step}.jsonl").read_text().splitlines()]
    return sorted(r["input"] for r in rows)


def weights(path: Path) -> dict[str, torch.Tensor]:
    files = sorted(path.glob("*.safetensors"))
    assert files, f"no safetensors in {path}"
    out = {}
    for f in files:
        out.update(load_file(f))
    return out


def check_run(cache: Path, out: Path, proc: subprocess.CompletedProcess, steps: list[int]) -> list[dict]:
    records = metrics_of(out)
    assert [r["step"] for r in records] == steps
    for r in records:
        numbers = {k: v for k, v in r["data"].items() if isinstance(v, (int, float))}
        bad = {k: v for k, v in numbers.items() if not math.isfinite(v)}
        assert not bad, bad
        for key in ("critic/score/mean", "actor/entropy", "actor/grad_norm", "response_length/mean"):
            assert key in numbers, key
        # the rewards came from our grader: its per-sample statuses cover every response
        statuses = sum(
            numbers[f"grader/status/{s}"] for s in ("ok", "no_answer", "timeout", "error", "bad_ground_truth")
        )
        assert statuses == pytest.approx(1.0)
        assert 0.0 <= numbers["grader/acc"] <= 1.0
    last = steps[-1]
    ckpt = out / "checkpoints"
    assert (ckpt / "latest_checkpointed_iteration.txt").read_text().strip() == str(last)
    assert (ckpt / f"global_step_{last}" / "actor").is_dir()
    # the table and the closing line of recipes.train
    assert "step  reward    acc" in proc.stdout
    assert f"done: metrics in {out}/metrics/" in proc.stdout
    return records


def check_weights_changed(cache: Path, out: Path, step: int) -> None:
    before = weights(cache / "models" / "tiny")
    after = weights(out / "checkpoints" / f"global_step_{step}" / "actor" / "huggingface")
    common = sorted(set(before) & set(after))
    assert common, (sorted(before)[:3], sorted(after)[:3])
    moved = max((after[k].float() - before[k].float()).abs().max().item() for k in common)
    assert moved > 1e-5, moved


@pytest.fixture(scope="module")
def grpo_uninterrupted(cache, tmp_path_factory):
    """The reference: 3 GRPO steps in one launch."""
    out = tmp_path_factory.mktemp("grpo_3")
    proc = train(cache, out, "grpo", 3)
    check_run(cache, out, proc, [1, 2, 3])
    return out


@pytest.mark.parametrize("method", ["grpo", "dr_grpo", "dapo"])
def test_baseline_trains_checkpoints_and_resumes(method, cache, tmp_path, grpo_uninterrupted):
    out = tmp_path / method
    proc = train(cache, out, method, 2)
    records = check_run(cache, out, proc, [1, 2])
    check_weights_changed(cache, out, 2)
    assert any(r["data"]["actor/grad_norm"] > 0 for r in records)

    # resume: a second launch with a larger step budget continues at step 3
    proc = train(cache, out, method, 3)
    records = check_run(cache, out, proc, [1, 2, 3])
    assert records[-1]["step"] == 3 and len(metrics_of(out)) == 3

    if method != "dapo":  # dynamic sampling consumes a random number of batches per step
        for step in (1, 2, 3):
            assert prompts_at(out, step) == prompts_at(grpo_uninterrupted, step), step
