"""The grader benchmark runs end to end (tiny step, short limits) and prints its table.
Also shows `scripts/` runs as a file although verl's wheel installs a top-level `scripts`."""

import json
import subprocess
import sys
from pathlib import Path

import pytest
from script_module import load_script  # tests/script_module.py

BENCH = Path(__file__).resolve().parents[1] / "scripts" / "bench" / "grader_bench.py"


# The batch API grades the hanging step in ~6 s on a busy 2-core machine (8 hanging responses, 2
# workers, a 1 s limit: four rounds of kills and worker restarts), and make test's load has pushed
# the threaded contenders past the old 30 s cap. A hanging response that its time limit does not
# stop never finishes, so any finite cap catches that: 120 s leaves room for any load, and costs
# nothing when every contender finishes.
QUESTIONS, CAP = 2, 120


@pytest.mark.slow
def test_grader_bench_prints_both_tables():
    out = subprocess.run(
        [sys.executable, str(BENCH), "--questions", str(QUESTIONS), "--cap", str(CAP), "--timeout-s", "1"],
        capture_output=True,
        text=True,
        timeout=900,
    )
    assert out.returncode == 0, out.stderr[-3000:]
    text = out.stdout
    assert "## clean step" in text and "## same step + 8 hanging responses" in text
    rows = [line for line in text.splitlines() if line.startswith("| ours") or line.startswith("| verl")]
    assert len(rows) == 6, text
    # Every row finished or says it was killed at the cap. Under make test's load a threaded
    # contender (verl's, and once even ours with 8 threads) can run out of the cap; the batch API,
    # the one the trainer uses, must finish both steps.
    assert all(r.endswith(("| 16/16 |", "| 24/24 |")) or f"(killed at the {CAP} s cap)" in r for r in rows), (
        text
    )
    assert [r.endswith(("| 16/16 |", "| 24/24 |")) for r in rows if "grade_batch" in r] == [True, True], text
    # the ratio is printed when verl's built-in finished the clean step (its row comes first)
    assert ("Throughput, ours (same calling convention) / verl built-in" in text) == rows[0].endswith(
        "| 16/16 |"
    )


def test_grader_bench_reports_a_contender_killed_at_the_cap():
    """A contender killed at the cap wrote no latencies: its row says so (it used to raise KeyError)."""
    bench = load_script(BENCH)
    row = bench._fmt_row("verl built-in", {"done": 3, "total": 16, "wall_s": 90.0, "capped": True}, 90.0)
    assert row == "| verl built-in | > 90 | - | - | - | 3/16 (killed at the 90 s cap) |"
    partial = {"done": 0, "total": None, "wall_s": 90.0, "capped": True}  # killed before it wrote anything
    assert bench._fmt_row("ours", partial, 90.0).endswith("| 0/? (killed at the 90 s cap) |")


PA_BENCH = BENCH.parent / "prompt_aug_bench.py"


@pytest.mark.slow
def test_prompt_aug_bench_prints_its_table():
    out = subprocess.run(
        [sys.executable, str(PA_BENCH), "--prompts", "50"], capture_output=True, text=True, timeout=300
    )
    assert out.returncode == 0, out.stderr[-3000:]
    rows = [
        line
        for line in out.stdout.splitlines()
        if line.startswith("| verl default") or line.startswith("| ours")
    ]
    assert len(rows) == 2, out.stdout
    assert float(rows[0].split("|")[3]) == 1.0 and float(rows[1].split("|")[3]) > 0, out.stdout


VLLM_BENCH = BENCH.parent / "vllm_cpu_bench.py"


@pytest.mark.slow
@pytest.mark.vllm
def test_vllm_cpu_bench_gives_every_contender_the_same_work(tmp_path):
    """Real vLLM engines and transformers on a random tiny model: each generates exactly
    prompts x n x tokens tokens, and the table has a row per contender with its speed relative
    to transformers (one vLLM engine of the four contenders: each costs ~40 s of start-up)."""
    from recipes.tools.models import build_tiny

    model = build_tiny(tmp_path / "tiny", warm_start_steps=0)
    out = subprocess.run(
        [
            sys.executable,
            str(VLLM_BENCH),
            "--model-path",
            str(model),
            "--prompts",
            "3",
            "--n",
            "2",
            "--tokens",
            "8",
            "--contenders",
            "transformers,vllm-float32",
        ],
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert out.returncode == 0, out.stdout[-3000:]
    results = [line for line in out.stdout.splitlines() if line.startswith("  ")]
    assert len(results) == 2 and all("'tokens': 48" in line for line in results), out.stdout
    rows = [
        line
        for line in out.stdout.splitlines()
        if line.startswith("| transformers") or line.startswith("| vllm-")
    ]
    assert [r.split(" | ")[0] for r in rows] == ["| transformers", "| vllm-float32"]
    assert rows[0].split(" | ")[4] == "1.00x"


PRECISION_BENCH = BENCH.parent / "cpu_precision.py"


@pytest.mark.slow
def test_cpu_precision_bench_names_the_cpu_and_the_chosen_dtype():
    out = subprocess.run(
        [sys.executable, str(PRECISION_BENCH), "--size", "256", "--repeats", "1"],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert out.returncode == 0, out.stderr[-3000:]
    assert "CPU: " in out.stdout and "platform=cpu trains in: float32" in out.stdout, out.stdout
    assert any(isa in out.stdout for isa in ("AVX2", "AVX512", "DEFAULT", "SVE", "VSX", "ZVECTOR")), (
        out.stdout
    )
    rows = {
        line.split("|")[1].strip(): line.split("|")
        for line in out.stdout.splitlines()
        if line.startswith("| ")
    }
    assert rows["float32"][3].strip() == "1.000x" and float(rows["bfloat16"][2]) > 0, out.stdout


ACTOR = BENCH.parent / "actor_memory.py"


def test_actor_memory_bench_spec_measure_and_table_on_the_cpu(tmp_path):
    """The spec holds the plan's figure for each moment; `measure` runs its three updates and the
    log-prob pass (here on the CPU with a tiny model of the spec's shape: torch gives no peak there);
    the table puts the plan beside what was measured, and "-" where nothing was."""
    spec = tmp_path / "spec.json"
    run = [sys.executable, str(ACTOR)]
    out = subprocess.run(
        [*run, "spec", "--out", str(spec), "--presets", "cw_grpo_open_rs,cw_grpo_open_rs_7b"],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert out.returncode == 0, out.stderr[-3000:]
    shapes = json.loads(spec.read_text())
    assert [s["model"] for s in shapes] == [
        "deepseek-ai/DeepSeek-R1-Distill-Qwen-1.5B",
        "Qwen/Qwen2.5-Math-7B-Instruct",
    ]
    assert set(shapes[0]["plan_gib"]) == {"update", "log-prob", "optimizer step"}
    tiny = dict(shapes[0], tokens=96, logprob_tokens=160, seq=64)
    tiny["arch"] = dict(
        tiny["arch"],
        hidden_size=32,
        num_hidden_layers=2,
        num_attention_heads=2,
        num_key_value_heads=1,
        intermediate_size=64,
        vocab_size=256,
        head_dim=16,
    )
    spec.write_text(json.dumps([tiny, shapes[1]]))
    results = tmp_path / "results.jsonl"
    # a budget of 0 s: the smallest shape is measured, the 7B is not started
    out = subprocess.run(
        [*run, "measure", str(spec), "--out", str(results), "--device", "cpu", "--budget-s", "0"],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert out.returncode == 0, out.stderr[-3000:]
    assert "Qwen/Qwen2.5-Math-7B-Instruct@12288/12288x4096: not measured (budget of 0 s spent)" in out.stdout
    (measured,) = [json.loads(line) for line in results.read_text().splitlines()]
    assert measured["batch"] == 2 and measured["seq"] == 48 and measured["s_per_update"] > 0
    # untied embeddings and head; per layer q and o 32 x 32, k and v 32 x 16, their biases, the MLP, 2 norms
    layer = 2 * 32 * 32 + 2 * 32 * 16 + (32 + 2 * 16) + 3 * 32 * 64 + 2 * 32
    assert measured["params"] == 2 * 256 * 32 + 2 * layer + 32
    table = subprocess.run(
        [*run, "table", str(spec), str(results)], capture_output=True, text=True, timeout=60
    )
    lines = table.stdout.splitlines()
    assert (
        lines[2].startswith("| deepseek-ai/DeepSeek-R1-Distill-Qwen-1.5B | 2 x 48 | 1 | ")
        and " / - |" in lines[2]
    )
    assert lines[3].endswith("| - | - |") and "127.7 / -" in lines[3]


CW_BENCH = BENCH.parent / "cw_grpo_bench.py"


def test_cw_grpo_bench_weights_check_measures_the_statistics_not_the_rounding():
    """The check printed before the GPU table: w~ from float32 and bfloat16 log-probs against float64
    from the same rounded log-probs. Here on the CPU (the GPU is the seam); statistics computed in
    bfloat16 would miss by ~1e-2, the float32 ones by ~1e-7."""
    bench = load_script(CW_BENCH)
    import torch

    line = bench.weights_error(bench.batch(8, 512), torch.device("cpu"))
    errors = [float(part.split(": ")[-1]) for part in line.split(", largest difference: ")[1].split(", ")]
    assert line.startswith("w~ on cpu vs float64 on the CPU") and len(errors) == 2, line
    assert all(0 <= e < 1e-5 for e in errors), line
