"""End to end: the checkpoints of steps 1 and 2 of a real CPU training run (the session's reference
run, tests/conftest.py), which eval.iterate converts with verl's merger and evaluates over the
fixture benchmarks; an incomplete checkpoint; --watch following checkpoints as they appear. All
three with the transformers backend: they test the checkpoint handling, and a vLLM engine costs
about a minute of both cores to start. eval.iterate with vLLM on a real run's checkpoints is
the Slurm cluster test's `eval_iterative.sbatch` job (tests/test_slurm_cluster.py); eval.run's
vLLM backend is tests/test_eval_vllm.py.

Skip with `-m "not e2e"` (or `make test-fast`)."""

import json
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file

pytestmark = [pytest.mark.slow, pytest.mark.e2e]

REPO = Path(__file__).resolve().parents[1]
FIXTURES = REPO / "tests" / "fixtures" / "eval"
EVAL_ARGS = ["--data-dir", str(FIXTURES), "--benchmarks", "arith,mixed,gpqa_diamond"]
EVAL_ARGS += ["--repeats", "2", "--max-new-tokens", "16", "--max-model-len", "512", "--no-progress"]


@pytest.fixture(scope="module")
def run(e2e, tmp_path_factory) -> Path:
    """Steps 1 and 2 of the session's reference training run (FSDP shards + verl's own HF weights
    in each checkpoint; tests/conftest.py)."""
    out = tmp_path_factory.mktemp("run")
    e2e.copy_checkpoints(e2e.reference()[0], out, upto=2)
    return out


def iterate(*args: str, backend: str = "hf", timeout: int = 600) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "eval.iterate", *args, *EVAL_ARGS, "--backend", backend],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=timeout,
    )


@pytest.mark.timeout(1500)  # the training run (its fixture) and two evaluations
def test_iterate_converts_and_evaluates_every_checkpoint_of_a_real_run(run):
    proc = iterate(str(run / "checkpoints"))
    assert proc.returncode == 0, proc.stderr[-4000:]
    hf, results = run / "hf", run / "eval"  # the defaults: beside checkpoints/
    merged = {}
    for step in (1, 2):
        target = hf / f"global_step_{step}"
        assert json.loads((target / ".converted.json").read_text())["source"].endswith(f"global_step_{step}")
        merged[step] = load_file(target / "model.safetensors")
        # verl's merger output equals, in bf16, the HF weights verl itself saved at that step
        saved = load_file(
            run / "checkpoints" / f"global_step_{step}" / "actor" / "huggingface" / "model.safetensors"
        )
        assert set(merged[step]) == set(saved)
        assert all(torch.equal(merged[step][k], saved[k].to(torch.bfloat16)) for k in saved)
    assert any(not torch.equal(merged[1][k], merged[2][k]) for k in merged[1])  # training moved the weights

    rows = {}
    for step in (1, 2):
        s = json.loads((results / f"global_step_{step}" / "summary.json").read_text())
        assert s["complete"] and s["model"] == str((hf / f"global_step_{step}").resolve())
        recs = (results / f"global_step_{step}" / "samples.jsonl").read_text().splitlines()
        assert len(recs) == 13 * 2
        correct = sum(json.loads(r)["correct"] for r in recs)
        assert s["per_question_average"]["accuracy"]["mean"] == pytest.approx(correct / 26)
        assert s["settings"]["backend"] == "hf"
        rows[step] = s
    table = (results / "steps.md").read_text()
    for step, s in rows.items():
        avg_b = 100 * s["per_benchmark_average"]["accuracy"]["mean"]
        avg_q = 100 * s["per_question_average"]["accuracy"]["mean"]
        assert f"| {step} | " in table and f"| {avg_b:.1f} ± 0.0 | {avg_q:.1f} ± 0.0 |" in table
    best = max((1, 2), key=lambda st: (rows[st]["per_question_average"]["accuracy"]["mean"], -st))
    assert f"best step by per-question average: {best} (" in proc.stdout
    steps = json.loads((results / "steps.json").read_text())
    assert [r["step"] for r in steps["rows"]] == [1, 2] and steps["incomplete_checkpoints"] == {}
    png = (results / "accuracy_vs_step.png").read_bytes()
    assert png[:8] == b"\x89PNG\r\n\x1a\n" and len(png) > 10_000

    # rerun: nothing converted or generated again
    again = iterate(str(run / "checkpoints"))
    assert again.returncode == 0, again.stderr[-3000:]
    for step in (1, 2):
        assert (
            f"[iterate] step {step} ({step}/2): already converted -> {hf / f'global_step_{step}'}; already evaluated"
            in again.stdout
        )
        assert len((results / f"global_step_{step}" / "runs.jsonl").read_text().splitlines()) == 1
    assert (results / "steps.md").read_text() == table


def test_a_truncated_checkpoint_or_a_shard_that_is_a_list_is_reported_and_skipped(run, tmp_path):
    """...and the other steps are evaluated (a list shard was a traceback that stopped them all)."""
    root = tmp_path / "checkpoints"
    shutil.copytree(run / "checkpoints", root)
    shard = root / "global_step_2" / "actor" / "model_world_size_1_rank_0.pt"
    shard.write_bytes(shard.read_bytes()[: shard.stat().st_size // 2])  # a copy cut short
    shutil.copytree(root / "global_step_1", root / "global_step_3")
    torch.save([1, 2], root / "global_step_3" / "actor" / shard.name)
    # the results folder under its old option name, which still works (for one release)
    proc = iterate(str(root), "--results-root", str(tmp_path / "eval"), "--hf-root", str(tmp_path / "hf"))
    assert proc.returncode == 1, proc.stderr[-3000:]
    assert "note: --results-root is now --out; the old name goes in the next release" in proc.stderr
    assert "[iterate] step 1 (1/3): converted -> " in proc.stdout
    assert "[iterate] step 2 (2/3): skipped:" in proc.stderr and "verl's merger cannot read it" in proc.stderr
    assert (
        f"[iterate] step 3 (3/3): skipped: {root / 'global_step_3' / 'actor' / shard.name}: not a shard of "
        "parameters (a dict of tensors): it holds a list" in proc.stderr
    )
    assert "Traceback" not in proc.stderr
    assert "%|" not in proc.stderr  # --no-progress: no bar, the merger's and the model loads' included
    assert sorted(p.name for p in (tmp_path / "hf").iterdir()) == ["global_step_1"]  # nothing half-converted
    steps = json.loads((tmp_path / "eval" / "steps.json").read_text())
    assert [r["step"] for r in steps["rows"]] == [1] and list(steps["incomplete_checkpoints"]) == ["2", "3"]


def test_watch_takes_each_checkpoint_once_verl_has_finished_it(run, tmp_path):
    """...and retries a checkpoint it could not read (a truncated shard) on the next polls."""
    root = tmp_path / "checkpoints"
    root.mkdir()
    cmd = [sys.executable, "-m", "eval.iterate", str(root), "--watch", "--poll-s", "0.5", "--until-step", "2"]
    cmd += [
        "--idle-exit-s",
        "300",
        "--out",
        str(tmp_path / "eval"),
        "--hf-root",
        str(tmp_path / "hf"),
    ]
    log = tmp_path / "stderr.log"
    with log.open("w") as err:
        proc = subprocess.Popen(
            [*cmd, *EVAL_ARGS, "--backend", "hf"], cwd=REPO, stdout=subprocess.PIPE, stderr=err, text=True
        )

    def wait_for(condition):
        deadline = time.monotonic() + 300
        while not condition():
            assert proc.poll() is None, log.read_text()[-3000:]
            assert time.monotonic() < deadline
            time.sleep(0.2)

    try:
        time.sleep(2)  # the watcher polls an empty root
        for step in (1, 2):
            shutil.copytree(run / "checkpoints" / f"global_step_{step}", root / f"global_step_{step}")
        shard = root / "global_step_2" / "actor" / "model_world_size_1_rank_0.pt"
        shard.write_bytes(shard.read_bytes()[:4096])  # still being copied, say
        (root / "latest_checkpointed_iteration.txt").write_text("1")  # step 2 still "being saved"
        wait_for(lambda: (tmp_path / "eval" / "global_step_1" / "summary.json").exists())
        time.sleep(2)
        assert not (tmp_path / "hf" / "global_step_2").exists()
        (root / "latest_checkpointed_iteration.txt").write_text("2")
        wait_for(lambda: "step 2 (2/2): skipped:" in log.read_text())
        shutil.copy(run / "checkpoints" / "global_step_2" / "actor" / shard.name, shard)
        stdout, _ = proc.communicate(timeout=300)
    finally:
        if proc.poll() is None:
            proc.kill()
    stderr = log.read_text()
    assert proc.returncode == 0, stderr[-3000:]
    assert stderr.count("step 2 (2/2): skipped:") == 1 and "verl's merger cannot read it" in stderr
    steps = json.loads((tmp_path / "eval" / "steps.json").read_text())
    assert [r["step"] for r in steps["rows"]] == [1, 2] and not steps.get("incomplete_checkpoints")
    assert stdout.count("evaluating") == 2
