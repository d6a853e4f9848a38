"""scripts/bench/overhead.py: the config plain verl runs is ours less exactly our parts; its reward
is verl's own math-verify; the ratios are medians over repeats, ours over plain; and end to end on
the tiny model (two steps, one launch of each, ~3 minutes on 2 cores), the numbers agree with
verl's own per-step records and the launches' clock readings, what both sides need was warmed
before either launch, plain verl really runs without our trainer, agent loop and reward manager,
and a rerun launches nothing."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from omegaconf import OmegaConf
from script_module import load_script  # tests/script_module.py

REPO = Path(__file__).resolve().parents[1]
SCRIPT = REPO / "scripts" / "bench" / "overhead.py"


def load_overhead():
    return load_script(SCRIPT)


def flat(tree, prefix: str = "") -> dict:
    if isinstance(tree, dict):
        return {k: v for key, value in tree.items() for k, v in flat(value, f"{prefix}{key}.").items()}
    return {prefix[:-1]: tree}


@pytest.mark.slow
def test_plain_verl_config_is_ours_less_exactly_our_parts(tmp_path):
    from recipes.train import compose

    overhead = load_overhead()
    ours = OmegaConf.to_container(compose(["experiment=demo_cpu", "method=[grpo]"]), resolve=True)
    plain = overhead.plain_config(ours, tmp_path / "verl_reward.py")
    a, b = flat(ours), flat(plain)
    changed = {k for k in a.keys() & b.keys() if a[k] != b[k]}
    assert changed == {
        "trainer.v1.trainer_mode",
        "actor_rollout_ref.rollout.agent.default_agent_loop",
        "reward.reward_manager.name",
        "reward.custom_reward_function.path",
    }
    assert (b["trainer.v1.trainer_mode"], b["actor_rollout_ref.rollout.agent.default_agent_loop"]) == (
        "sync",
        "single_turn_agent",
    )  # verl's defaults (verl/trainer/config/ppo_trainer.yaml, rollout/rollout.yaml)
    assert (
        b["reward.reward_manager.name"] == "naive"
        and b["reward.custom_reward_function.name"] == "compute_score"
    )
    assert {k.split(".")[0] for k in a.keys() - b.keys()} == {"recipes", "reward"}
    # what went from reward: our reward's settings, which verl's function does not take
    assert {k for k in a.keys() - b.keys() if k.startswith("reward.")} == {
        f"reward.custom_reward_function.reward_kwargs.{k}"
        for k in ours["reward"]["custom_reward_function"]["reward_kwargs"]
    }
    assert ours["recipes"]["platform"] == "cpu" and "recipes" not in plain


def test_plain_verls_reward_is_verls_own_math_verify(tmp_path):
    overhead = load_overhead()
    path = tmp_path / "verl_reward.py"
    path.write_text(overhead.VERL_REWARD)
    reward = load_script(path)
    score = reward.compute_score
    assert score("toy_arithmetic", "so \\boxed{12}", "12", extra_info={"index": 0}) == 1.0
    assert score("toy_arithmetic", "so \\boxed{13}", "12") == 0.0
    assert score("toy_arithmetic", "\\boxed{\\frac{1}{2}}", "0.5") == 1.0  # math-verify's equivalence


def run(startup: float, step: float, peak: float, gen: float) -> dict:
    phases = {
        p: 0.0 for p in ("gen", "old_log_prob", "ref", "adv", "update_actor", "update_weights", "other")
    }
    phases["gen"] = gen
    return {
        "steps": 4,
        "startup_s": startup,
        "before_ray_s": 5.0,
        "per_step_s": step,
        "peak_rss_gb": peak,
        "phases_s": phases,
        "clock": {"launched": 0.0, "ray_seen": 5.0, "step1_seen": startup + step},  # no median of these
    }


def test_each_number_is_the_median_over_repeats_and_the_table_says_where_it_goes():
    overhead = load_overhead()
    med = overhead._median_run([run(60, 3.0, 8.0, 2.0), run(70, 3.3, 9.0, 2.5), run(100, 3.1, 8.5, 2.1)])
    assert (med["startup_s"], med["per_step_s"], med["peak_rss_gb"], med["phases_s"]["gen"]) == (
        70,
        3.1,
        8.5,
        2.1,
    )
    plain, ours = run(50.0, 3.0, 8.0, 2.0), run(55.0, 3.15, 8.4, 2.1)
    parts = dict((p, (a, b)) for p, a, b in overhead._parts(plain, ours))
    assert parts["start-up: Ray up to step 1"] == (45.0, 50.0) and parts["step: gen"] == (2.0, 2.1)
    summary = {
        "models": {
            "tiny": {
                "startup_ratio": 1.1,
                "per_step_ratio": 1.05,
                "peak_memory_ratio": 1.05,
                "ours": ours,
                "plain": plain,
            }
        }
    }
    table = overhead.report(summary)
    assert "| tiny | **ours / plain** | **1.100** | **1.050** | **1.050** | |" in table
    assert "| tiny | step: gen | 2.000 | 2.100 | +0.100 |" in table
    assert table.startswith("| model |")  # no warm-up recorded: no line for it
    # a cold machine: what the warm-up built before any launch, on a line of its own
    summary["warm_up"] = [
        {"built": [["model smollm2_135m", 18.04], ["vLLM model info LlamaForCausalLM", 12.0]]}
        | {"imports_s": 11.96, "total_s": 44.0},
        {"built": [], "imports_s": 9.0, "total_s": 10.0},  # a later run into the same folder
    ]
    assert overhead.report(summary).splitlines()[:3] == [
        "cache: cold, built before any launch: model smollm2_135m 18.0 s, vLLM model info LlamaForCausalLM "
        "12.0 s; imports 12.0 s; warm-up 44.0 s in all, in no launch's numbers",
        "cache: warm (nothing to build); imports 9.0 s; warm-up 10.0 s in all, in no launch's numbers",
        "",
    ]


def test_the_warm_up_runs_when_a_launch_the_command_asks_for_is_missing(tmp_path):
    """The launches main() checks for a result.json are the ones compare() and variant_costs()
    make: the order ours, plain, plain, ours names them tiny_ours, tiny_plain, tiny_plain_2,
    tiny_ours_2."""
    overhead = load_overhead()
    args = overhead.parse_args(
        ["--out", str(tmp_path), "--variants", "defaults,prorl", "--smol-repeats", "1"]
    )
    assert overhead.launches(args) == [
        "tiny_ours",
        "tiny_plain",
        "tiny_ours_2",
        "tiny_plain_2",
        "smollm2_135m_ours",
        "smollm2_135m_plain",
        "tiny_defaults",
        "tiny_prorl",
    ]


@pytest.mark.slow
@pytest.mark.timeout(1200)
def test_overhead_bench_on_two_steps_of_the_tiny_model(tiny_model, recipes_cache, tmp_path):
    out = tmp_path / "overhead"
    cmd = [sys.executable, str(SCRIPT), "--out", str(out), "--models", "tiny", "--steps", "2"]
    cmd += ["--repeats", "1", "--variants", "", "--no-grader"]
    env = {**os.environ, "RECIPES_CACHE": str(recipes_cache), "RAY_DEDUP_LOGS": "0"}
    proc = subprocess.run(cmd, cwd=REPO, env=env, capture_output=True, text=True, timeout=1100)
    assert proc.returncode == 0, (proc.stdout[-3000:], proc.stderr[-3000:])
    assert proc.stdout.strip().splitlines()[-1].startswith(f"done: {out}/summary.json (startup_ratio ")

    s = json.loads((out / "summary.json").read_text())
    runs = {
        name: json.loads((out / "runs" / name / "result.json").read_text())
        for name in ("tiny_ours", "tiny_plain")
    }
    ours, plain = runs["tiny_ours"], runs["tiny_plain"]
    # verl's own per-step records (its file logger), read here without the script's code
    metrics = {
        name: [
            json.loads(line)
            for f in sorted((out / "runs" / name).rglob("*.jsonl"))
            for line in f.read_text().splitlines()
        ]
        for name in runs
    }
    # the numbers from first principles: with two steps, "the median of steps 2+" is step 2's time;
    # start-up is the clock from launch to step 1's record, less step 1's own time
    expected = {}
    for name, r in runs.items():
        step1, step2 = (m["data"] for m in sorted(metrics[name], key=lambda m: m["step"]))
        clock = r["clock"]
        expected[name] = {
            "startup_s": clock["step1_seen"] - clock["launched"] - step1["timing_s/step"],
            "before_ray_s": clock["ray_seen"] - clock["launched"],
            "per_step_s": step2["timing_s/step"],
            "gen_s": step2["timing_s/gen"],
            "update_actor_s": step2["timing_s/update_actor"],
        }
    e_ours, e_plain = expected["tiny_ours"], expected["tiny_plain"]
    ratios = {
        "startup_ratio": e_ours["startup_s"] / e_plain["startup_s"],
        "per_step_ratio": e_ours["per_step_s"] / e_plain["per_step_s"],
        "peak_memory_ratio": ours["peak_rss_gb"] / plain["peak_rss_gb"],  # the sampled peaks
    }
    tiny = s["models"]["tiny"]
    got = {k: tiny[k] for k in ratios} | {f"top {k}": s[k] for k in ratios}
    got |= {
        f"{who} {k}": tiny[who][k]
        for who in ("ours", "plain")
        for k in ("startup_s", "before_ray_s", "per_step_s")
    }
    got |= {
        f"{who} {p}_s": tiny[who]["phases_s"][p] for who in ("ours", "plain") for p in ("gen", "update_actor")
    }
    want = ratios | {f"top {k}": v for k, v in ratios.items()}
    want |= {
        f"{who} {k}": expected[f"tiny_{who}"][k] for who in ("ours", "plain") for k in expected["tiny_ours"]
    }
    assert got == pytest.approx(want, rel=1e-9)
    table = (out / "summary.md").read_text()
    assert (
        f"| tiny | **ours / plain** | **{ratios['startup_ratio']:.3f}** | **{ratios['per_step_ratio']:.3f}** "
        f"| **{ratios['peak_memory_ratio']:.3f}** | |"
    ) in table
    for r in (ours, plain):
        assert r["steps"] == 2 and 0 < r["before_ray_s"] < r["startup_s"] < r["wall_s"]
        assert r["peak_rss_gb"] > 1  # the driver, Ray and its workers, vLLM
    # what both sides need was there before either launch's clock started: the warm-up, on its
    # own line, finished first; the model's build stamp and vLLM's record of its class are older
    (warm,) = s["warm_up"]
    assert table.startswith("cache: ") and f"warm-up {warm['total_s']:.1f} s in all" in table.splitlines()[0]
    assert {what for what, _ in warm["built"]} <= {
        "model tiny",
        "data toy_arithmetic",
        "vLLM model info Qwen2ForCausalLM",
    }
    first = min(r["clock"]["launched"] for r in runs.values())
    assert warm["finished"] <= first
    infos = recipes_cache / "vllm" / "modelinfos" / "vllm-model_executor-models-qwen2-Qwen2ForCausalLM.json"
    assert (tiny_model / ".build_complete.json").stat().st_mtime < first and infos.stat().st_mtime < first
    # plain verl ran verl's own parts: none of our trainer's grader metrics, no `recipes` block
    assert all("grader/acc" in m["data"] for m in metrics["tiny_ours"])
    assert not any(k.startswith("grader/") for m in metrics["tiny_plain"] for k in m["data"])
    assert [m["step"] for m in metrics["tiny_plain"]] == [1, 2]
    assert "critic/score/mean" in metrics["tiny_plain"][0]["data"]  # verl's math-verify scored it
    plain_cfg = yaml.safe_load((out / "runs" / "tiny_plain" / "config.yaml").read_text())
    assert "recipes" not in plain_cfg
    assert not {"recipes_sync", "recipes_prompt_variants", "math_pool"} & set(
        map(str, flat(plain_cfg).values())
    )

    # a rerun keeps both launches
    again = subprocess.run(cmd, cwd=REPO, env=env, capture_output=True, text=True, timeout=600)
    assert again.returncode == 0 and "tiny_ours:" not in again.stdout and "tiny_plain:" not in again.stdout
    assert json.loads((out / "summary.json").read_text()) == s
