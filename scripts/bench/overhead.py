"""What our layer costs on top of verl: the same GRPO run through plain verl and through
`python -m recipes.train method=[grpo]`, side by side in one invocation.

    .venv/bin/python scripts/bench/overhead.py --out results/overhead      # ~45 min on 2 cores
    .venv/bin/python scripts/bench/overhead.py --out DIR --models tiny --variants '' --no-grader

For each model (--models: the tiny model for --steps steps, --repeats launches of each; SmolLM2-135M
for --smol-steps, --smol-repeats), launched in the order ours, plain, plain, ours, ...:
  ours   `python -m recipes.train experiment=demo_cpu model=M method=[grpo]`, with our two
         defaults that change the computation off (recipes.deterministic=false,
         recipes.skip_old_log_prob=false) so that both runs compute the same thing;
  plain  `python -m verl.trainer.main_ppo` on the config `ours` resolved and ran with (its
         config.yaml), less our parts: no `recipes` block, verl's `sync` trainer, verl's
         single-turn agent loop, verl's `naive` reward manager calling verl's own math-verify
         reward (verl/utils/reward_score/math_verify.py, behind a three-line adapter to the
         reward-function signature). On a CPU verl cannot run without our CPU platform, so plain
         verl keeps it: the `verl.plugins` entry point that `import verl` loads, the CPU
         environment (recipes/platforms/cpu.py CPU_ENV) and the vLLM session around the launch.
Then, on the tiny model: `ours` with our defaults (deterministic kernels, no separate old-log-prob
pass) and each method added to GRPO (--variants) with the learning benchmark's settings; and the
hostile grading step (grader_bench.py: 2,048 responses + 8 that hang math-verify) graded by verl's
built-in math-verify reward and by ours.

Before the first timed launch, one fresh interpreter warms what both sides need, so that neither
side pays a one-time cost the other does not: each model's folder (the tiny model's build, ~40 s;
SmolLM2's conversion from its GGUF, ~20 s), the toy data, vLLM's record of each model's class
(~12 s on 2 cores; vLLM writes it under $RECIPES_CACHE/vllm at its first engine start) and both
sides' imports (the disk cache, Python's bytecode). What it built, and how long that took, goes on
a line of its own (`cache: cold, built ...` or `cache: warm`) in the output, summary.json
(`warm_up`) and summary.md; none of it is in any launch's numbers.

Start-up is the time from launch to the end of step 1 minus step 1's own time; per step the median
of steps 2+ (verl's timing_s/step); peak memory the largest summed RSS of the launch's processes
(sampled every 0.5 s: the machine must be otherwise idle); each the median over the repeats.
Writes OUT/summary.json (the ratios, ours over plain verl, for each model; at the top level the
largest over the models) and OUT/summary.md (the tables). A rerun with the same OUT keeps the
finished launches.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import time
from pathlib import Path

import psutil
import yaml

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(Path(__file__).resolve().parent))
from demo_profile import descendants_rss  # noqa: E402
from learning import METHOD_OVERRIDES  # noqa: E402

# our defaults that change what a step computes, off in the comparison with plain verl
SAME_COMPUTATION = ["recipes.deterministic=false", "recipes.skip_old_log_prob=false"]
# verl's phases of a step (timing_s/<phase>), in the order a step runs them
# (the reward is computed during generation, inside gen); "other" is the step less these
PHASES = ("gen", "old_log_prob", "ref", "adv", "update_actor", "update_weights")
# timed on the tiny model against ours: GRPO with our defaults, and each method added to GRPO
VARIANTS = ("defaults", "prompt_aug", "ta_grpo", "cw_grpo", "prorl")


def plain_config(ours: dict, shim: Path) -> dict:
    """The config plain verl runs: ours as it ran, less our parts (see the module docstring);
    `shim`: a file holding VERL_REWARD."""
    cfg = json.loads(json.dumps(ours))  # a deep copy
    cfg.pop("recipes", None)
    cfg["trainer"]["v1"]["trainer_mode"] = "sync"
    cfg["actor_rollout_ref"]["rollout"]["agent"]["default_agent_loop"] = "single_turn_agent"
    reward = cfg["reward"]
    reward["reward_manager"]["name"] = "naive"
    reward["custom_reward_function"] = {"path": str(shim), "name": "compute_score", "reward_kwargs": {}}
    return cfg


# verl's built-in math-verify reward takes (model_output, ground_truth); a reward function is called
# with data_source, solution_str, ground_truth, extra_info. verl's own dispatcher
# (default_compute_score) knows no "toy_arithmetic" data source, so plain verl gets this adapter.
VERL_REWARD = """from verl.utils.reward_score import math_verify


def compute_score(data_source, solution_str, ground_truth, extra_info=None, **kwargs):
    return math_verify.compute_score(solution_str, ground_truth)
"""


def _ray_started(root: psutil.Process) -> bool:
    """Whether the launch has started Ray's head (its GCS server)."""
    try:
        return any(p.name().startswith("gcs_server") for p in root.children())
    except psutil.Error:
        return False


def _metrics(path: Path) -> list[dict]:
    files = [path] if path.is_file() else sorted(path.glob("*.jsonl")) if path.is_dir() else []
    rows = [json.loads(line) for f in files for line in f.read_text().splitlines() if line.strip()]
    return sorted(rows, key=lambda r: r["step"])


def _phase(data: dict, phase: str) -> float:
    if phase == "other":
        return data["timing_s/step"] - sum(data.get(f"timing_s/{p}", 0.0) for p in PHASES)
    return data.get(f"timing_s/{phase}", 0.0)


def launch(name: str, cmd: list[str], metrics: Path, folder: Path, env: dict) -> dict:
    """Run one training launch, sampling its memory; its timings from verl's metrics. Kept in
    folder/result.json: a rerun reuses it."""
    done = folder / "result.json"
    if done.exists():
        return json.loads(done.read_text())
    print(f"{name}: {' '.join(cmd[2:5])} ...", flush=True)
    started = time.time()
    with (folder / "launch.log").open("w") as log:
        proc = subprocess.Popen(cmd, cwd=REPO, stdout=log, stderr=subprocess.STDOUT, env=env)
    root, peak, ray_start, step1_end = psutil.Process(proc.pid), 0, None, None
    while proc.poll() is None:
        peak = max(peak, descendants_rss(root))
        if ray_start is None and _ray_started(root):
            ray_start = time.time()
        if step1_end is None and _metrics(metrics):
            step1_end = time.time()
        time.sleep(0.5)
    wall = time.time() - started
    if proc.returncode != 0:
        sys.exit(f"{name} failed ({proc.returncode}); its output: {folder / 'launch.log'}")
    rows = _metrics(metrics)
    if len(rows) < 2:
        sys.exit(f"{name}: {len(rows)} step(s) in {metrics}; the median of steps 2+ needs two")
    step1 = rows[0]["data"]["timing_s/step"]
    result = {
        "startup_s": step1_end - started - step1,
        "before_ray_s": (ray_start or started) - started,  # interpreter, imports, config, checks
        "step1_s": step1,
        "per_step_s": statistics.median(r["data"]["timing_s/step"] for r in rows[1:]),
        "phases_s": {
            p: statistics.median(_phase(r["data"], p) for r in rows[1:]) for p in (*PHASES, "other")
        },
        "peak_rss_gb": peak / 2**30,
        "wall_s": wall,
        "steps": len(rows),
        # the clock readings (epoch seconds) the times above come from, kept for a check
        "clock": {"launched": started, "ray_seen": ray_start, "step1_seen": step1_end},
    }
    done.write_text(json.dumps(result, indent=1))
    return result


def base_overrides(model: str, steps: int) -> list[str]:
    """The overrides every launch on `model` shares."""
    base = ["experiment=demo_cpu", f"model={model}", f"trainer.total_training_steps={steps}"]
    return [*base, "trainer.save_freq=-1", "trainer.logger=[file]"]


def _stamp(path: Path) -> float | None:
    return path.stat().st_mtime if path.exists() else None


def warm_child(models: list[str]) -> dict:
    """Run in a fresh interpreter by `warm_up`: both sides' imports, then for each model what
    recipes.train's preparation builds before Ray (the model folder, the toy data) and vLLM's
    record of the model's class. Returns the imports' seconds and [what, seconds] of each thing
    it had to build (nothing on a warm machine)."""
    started = time.time()
    import verl.trainer.main_ppo  # noqa: F401  (plain verl's entry point)
    from vllm.model_executor.models.registry import ModelRegistry

    from recipes.files import cache_dir
    from recipes.tools.data import ensure_data
    from recipes.tools.models import STAMP, ensure_model
    from recipes.train import compose

    imports_s = time.time() - started
    built = []

    def timed(what: str, marker: Path, build, *args, **kwargs) -> None:
        before, t = _stamp(marker), time.time()
        build(*args, **kwargs)
        if _stamp(marker) != before:  # written now: a cold cache
            built.append([what, round(time.time() - t, 1)])

    # where both sides' vLLM keeps it: the session's VLLM_CACHE_ROOT (cpu_vllm.vllm_env), or the user's
    infos = Path(os.environ.get("VLLM_CACHE_ROOT") or cache_dir() / "vllm") / "modelinfos"
    for model in models:
        cfg = compose(base_overrides(model, 2))
        cache, train = Path(cfg.recipes.cache_dir), Path(cfg.data.train_files)
        timed(f"model {model}", cache / "models" / model / STAMP, ensure_model, model, cache_dir=cache)
        name = cfg.recipes.data
        timed(f"data {name}", train, ensure_data, name, out_dir=train.parent, validate=False)
        config = json.loads((Path(cfg.actor_rollout_ref.model.path) / "config.json").read_text())
        for arch in config["architectures"]:
            timed(f"vLLM model info {arch}", infos, ModelRegistry.models[arch].inspect_model_cls)
    return {"imports_s": round(imports_s, 1), "built": built}


def warm_up(models: list[str]) -> dict:
    """`warm_child` in a fresh interpreter with the environment of a plain launch (the CPU
    platform's, vLLM's session): its result, with the total seconds and whether the cache was cold."""
    from recipes.platforms.cpu import CPU_ENV
    from recipes.platforms.cpu_vllm import CPUSession

    code = (
        f"import json, sys; sys.path.insert(0, {str(Path(__file__).resolve().parent)!r}); "
        f"import overhead; print('WARM ' + json.dumps(overhead.warm_child({models!r})))"
    )
    print(f"warm-up: {', '.join(models)} (models, data, vLLM's model info, imports) ...", flush=True)
    started = time.time()
    session = CPUSession(orphan_prefixes=("psm_", "sem.mp-"))
    try:
        env = {**os.environ, **CPU_ENV}
        proc = subprocess.run([sys.executable, "-c", code], cwd=REPO, env=env, capture_output=True, text=True)
    finally:
        session.close()
    lines = [line for line in proc.stdout.splitlines() if line.startswith("WARM ")]
    if proc.returncode != 0 or not lines:
        sys.exit(f"warm-up failed ({proc.returncode}):\n{proc.stderr[-3000:]}")
    result = json.loads(lines[-1].removeprefix("WARM "))
    result["total_s"] = round(time.time() - started, 1)
    result["finished"] = time.time()  # epoch seconds: before the first launch's clock starts
    result["cache"] = "cold" if result["built"] else "warm"
    print(warm_line(result), flush=True)
    return result


def warm_line(w: dict) -> str:
    """The warm-up's line of the output and of summary.md."""
    built = ", ".join(f"{what} {s:.1f} s" for what, s in w["built"])
    what = f"cold, built before any launch: {built}" if built else "warm (nothing to build)"
    return (
        f"cache: {what}; imports {w['imports_s']:.1f} s; warm-up {w['total_s']:.1f} s in all, "
        "in no launch's numbers"
    )


def _fresh(folder: Path) -> Path:
    """A launch's folder, emptied unless it holds a finished launch (an interrupted one's metrics
    must not mix with the next one's)."""
    if not (folder / "result.json").exists():
        shutil.rmtree(folder, ignore_errors=True)
    folder.mkdir(parents=True, exist_ok=True)
    return folder


def run_ours(name: str, out: Path, overrides: list[str]) -> dict:
    folder = _fresh(out / "runs" / name)
    cmd = [sys.executable, "-m", "recipes.train", *overrides, f"recipes.output_dir={folder}"]
    return launch(name, cmd, folder / "metrics", folder, dict(os.environ))


def run_plain(name: str, out: Path, ours_folder: Path) -> dict:
    """Plain verl on the config the `ours` launch in `ours_folder` ran with."""
    from recipes.platforms.cpu import CPU_ENV
    from recipes.platforms.cpu_vllm import CPUSession

    folder = _fresh(out / "runs" / name)
    (folder / "verl_reward.py").write_text(VERL_REWARD)
    cfg = plain_config(yaml.safe_load((ours_folder / "config.yaml").read_text()), folder / "verl_reward.py")
    cfg["trainer"]["default_local_dir"] = str(folder / "checkpoints")
    (folder / "config.yaml").write_text(yaml.safe_dump(cfg, sort_keys=False))
    metrics = folder / "metrics.jsonl"
    cmd = [sys.executable, "-m", "verl.trainer.main_ppo", f"--config-path={folder}", "--config-name=config"]
    cmd += [f"hydra.run.dir={folder / 'hydra'}"]
    session = CPUSession(orphan_prefixes=("psm_", "verl_weights_", "sem.mp-"))  # what recipes.train opens
    try:
        env = {**os.environ, **CPU_ENV, "VERL_FILE_LOGGER_PATH": str(metrics)}
        return launch(name, cmd, metrics, folder, env)
    finally:
        session.close()


def compare(model: str, base: list[str], out: Path, repeats: int) -> dict:
    """ours against plain verl on one model, the same computation: `repeats` launches of each,
    in the order ours, plain, plain, ours, ... (drift on the machine hits both alike); each
    number is the median over the repeats."""
    runs: dict[str, list[dict]] = {"ours": [], "plain": []}
    first_ours = out / "runs" / f"{model}_ours"
    for i in range(repeats):
        suffix = f"_{i + 1}" if i else ""
        order = ("ours", "plain") if i % 2 == 0 else ("plain", "ours")
        for kind in order:
            if kind == "ours":
                overrides = [*base, "method=[grpo]", *SAME_COMPUTATION]
                runs["ours"].append(run_ours(f"{model}_ours{suffix}", out, overrides))
            else:  # the config the first ours launch ran with
                runs["plain"].append(run_plain(f"{model}_plain{suffix}", out, first_ours))
    ours, plain = (_median_run(runs[k]) for k in ("ours", "plain"))
    return {
        "startup_ratio": ours["startup_s"] / plain["startup_s"],
        "per_step_ratio": ours["per_step_s"] / plain["per_step_s"],
        "peak_memory_ratio": ours["peak_rss_gb"] / plain["peak_rss_gb"],
        "ours": ours,
        "plain": plain,
        "repeats": repeats,
    }


def _median_run(results: list[dict]) -> dict:
    """The median over launches of each number (of each phase too). A launch's clock readings
    (`clock`: when it started, saw Ray, saw step 1) stay in its own result.json."""
    med = {
        k: statistics.median(r[k] for r in results)
        for k, v in results[0].items()
        if isinstance(v, int | float)
    }
    med["phases_s"] = {
        p: statistics.median(r["phases_s"][p] for r in results) for p in results[0]["phases_s"]
    }
    return med


def variant_costs(base: list[str], out: Path, variants: list[str], grpo: dict) -> dict:
    """GRPO with our defaults, and each method added to GRPO (same computation as `ours`, with
    the learning benchmark's settings): seconds per step against GRPO's."""
    costs = {}
    for v in variants:
        if v == "defaults":
            r = run_ours("tiny_defaults", out, [*base, "method=[grpo]"])
        else:
            overrides = [*base, f"method=[grpo,{v}]", *SAME_COMPUTATION, *METHOD_OVERRIDES[v]]
            r = run_ours(f"tiny_{v}", out, overrides)
        costs[v] = {**r, "extra_per_step_s": r["per_step_s"] - grpo["per_step_s"]}
        costs[v]["per_step_ratio"] = r["per_step_s"] / grpo["per_step_s"]
    return costs


def hostile_grading(out: Path, questions: int, cap: float) -> dict:
    """grader_bench.py's clean and hostile steps, verl's built-in reward against ours (the math_pool
    reward manager submits a whole chunk to the pool at once: grader_bench's `ours_batch`)."""
    done = out / "grading.json"
    if done.exists():
        return json.loads(done.read_text())
    from grader_bench import run_contender

    print(f"grading: {questions} x 8 responses, + 8 hanging ...", flush=True)
    result = {}
    for key, contender in (("verl_builtin", "verl_builtin"), ("ours", "ours_batch")):
        steps = run_contender(contender, questions, [0, 8], cap, timeout_s=5.0)
        result[key] = {"clean_s": steps[0]["wall_s"], "hostile_s": steps[8]["wall_s"]}
        result[key]["capped"] = steps[0]["capped"] or steps[8]["capped"]
    result["hostile_ratio"] = result["ours"]["hostile_s"] / result["verl_builtin"]["hostile_s"]
    done.write_text(json.dumps(result, indent=1))
    return result


def _parts(plain: dict, ours: dict) -> list[tuple[str, float, float]]:
    """(part, plain's seconds, ours') for start-up's two parts and each phase of a step."""
    rows = [
        ("start-up: before Ray (imports, config, checks)", plain["before_ray_s"], ours["before_ray_s"]),
        (
            "start-up: Ray up to step 1",
            plain["startup_s"] - plain["before_ray_s"],
            ours["startup_s"] - ours["before_ray_s"],
        ),
    ]
    rows += [(f"step: {p}", plain["phases_s"][p], ours["phases_s"][p]) for p in (*PHASES, "other")]
    return [*rows, ("step", plain["per_step_s"], ours["per_step_s"])]


def report(summary: dict) -> str:
    """The tables of summary.md, after the warm-up's line(s)."""
    lines = [warm_line(w) for w in summary.get("warm_up", [])]
    lines += [""] if lines else []
    lines += [
        "| model | run | start-up s | s/step (steps 2+) | peak RSS GiB | steps |",
        "|---|---|---:|---:|---:|---:|",
    ]
    for model, c in summary["models"].items():
        for run in ("plain", "ours"):
            r = c[run]
            lines.append(
                f"| {model} | {'plain verl' if run == 'plain' else 'recipes.train'} | {r['startup_s']:.1f} "
                f"| {r['per_step_s']:.2f} | {r['peak_rss_gb']:.2f} | {r['steps']:.0f} |"
            )
        lines.append(
            f"| {model} | **ours / plain** | **{c['startup_ratio']:.3f}** | **{c['per_step_ratio']:.3f}** "
            f"| **{c['peak_memory_ratio']:.3f}** | |"
        )
    lines += ["", "Where the difference goes (seconds; per step: medians of steps 2+):", ""]
    lines += ["| model | part | plain verl | ours | ours - plain |", "|---|---|---:|---:|---:|"]
    for model, c in summary["models"].items():
        for part, a, b in _parts(c["plain"], c["ours"]):
            lines.append(f"| {model} | {part} | {a:.3f} | {b:.3f} | {b - a:+.3f} |")
    rows = summary.get("tiny_runs", {})
    if rows:
        grpo = summary["models"]["tiny"]["ours"]
        lines += ["", "On the tiny model, against recipes.train method=[grpo] (same computation):", ""]
        lines += ["| run | s/step | extra s/step | ratio | start-up s |", "|---|---:|---:|---:|---:|"]
        lines.append(f"| grpo | {grpo['per_step_s']:.2f} | | 1.000 | {grpo['startup_s']:.1f} |")
        for name, r in rows.items():
            label = (
                "grpo, our defaults (deterministic, no old-log-prob pass)"
                if name == "defaults"
                else f"grpo + {name}"
            )
            lines.append(
                f"| {label} | {r['per_step_s']:.2f} | {r['per_step_s'] - grpo['per_step_s']:+.2f} "
                f"| {r['per_step_s'] / grpo['per_step_s']:.3f} | {r['startup_s']:.1f} |"
            )
    g = summary.get("grading")
    if g:
        lines += [
            "",
            "One training step graded (2,048 responses; hostile: + 8 that hang math-verify), wall s:",
            "",
        ]
        lines += ["| reward | clean step | hostile step |", "|---|---:|---:|"]
        for key, label in (
            ("verl_builtin", "verl built-in math_verify (8 threads)"),
            ("ours", "ours (math_pool)"),
        ):
            capped = " (capped)" if g[key]["capped"] else ""
            lines.append(f"| {label} | {g[key]['clean_s']:.1f} | {g[key]['hostile_s']:.1f}{capped} |")
    return "\n".join(lines) + "\n"


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument(
        "--out", type=Path, required=True, help="results folder (reused: finished launches are kept)"
    )
    p.add_argument("--models", default="tiny,smollm2_135m", help="comma-separated configs/model/ names")
    p.add_argument("--steps", type=int, default=8, help="training steps of each tiny-model launch (8)")
    p.add_argument("--smol-steps", type=int, default=4, help="training steps of each SmolLM2 launch (4)")
    p.add_argument(
        "--variants",
        default=",".join(VARIANTS),
        help="timed on the tiny model against GRPO: `defaults` (ours with our defaults) and methods "
        "added to GRPO ('' for none)",
    )
    p.add_argument(
        "--repeats", type=int, default=2, help="launches of plain verl and of ours, tiny model (2)"
    )
    p.add_argument("--smol-repeats", type=int, default=1, help="the same for SmolLM2, ~6 min a launch (1)")
    p.add_argument("--grading-questions", type=int, default=256, help="questions of the graded step (x 8)")
    p.add_argument("--no-grader", action="store_true", help="leave the grading step out")
    args = p.parse_args(argv)
    args.models = [m for m in args.models.split(",") if m]
    args.variants = [v for v in args.variants.split(",") if v]
    if unknown := sorted(set(args.variants) - set(VARIANTS)):
        p.error(f"--variants: unknown {unknown}; choose from {','.join(VARIANTS)}")
    if not args.models or min(args.steps, args.smol_steps) < 2 or min(args.repeats, args.smol_repeats) < 1:
        p.error(
            "--models must name at least one model, --steps and --smol-steps must be >= 2, the repeats >= 1"
        )
    if args.variants and "tiny" not in args.models:
        p.error("--variants are timed on the tiny model: add tiny to --models")
    return args


def launches(args: argparse.Namespace) -> list[str]:
    """The names of the launches (OUT/runs/<name>) the command line asks for."""
    names = []
    for model in args.models:
        repeats = args.repeats if model == "tiny" else args.smol_repeats
        for i in range(repeats):
            suffix = f"_{i + 1}" if i else ""
            names += [f"{model}_ours{suffix}", f"{model}_plain{suffix}"]
    return names + [f"tiny_{v}" for v in args.variants]


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    out = args.out.resolve()
    out.mkdir(parents=True, exist_ok=True)
    # every warm-up that preceded launches into OUT (a rerun that launches nothing adds none)
    warm_file = out / "warm_up.json"
    warm_ups = json.loads(warm_file.read_text()) if warm_file.exists() else []
    if any(not (out / "runs" / name / "result.json").exists() for name in launches(args)):
        warm_ups.append(warm_up(args.models))
        warm_file.write_text(json.dumps(warm_ups, indent=1))
    summary: dict = {"models": {}, "warm_up": warm_ups}
    for model in args.models:
        steps = args.steps if model == "tiny" else args.smol_steps
        base = base_overrides(model, steps)
        summary["models"][model] = compare(
            model, base, out, args.repeats if model == "tiny" else args.smol_repeats
        )
        if model == "tiny":
            tiny_base = base
    if args.variants:
        summary["tiny_runs"] = variant_costs(tiny_base, out, args.variants, summary["models"]["tiny"]["ours"])
    if not args.no_grader:
        summary["grading"] = hostile_grading(out, args.grading_questions, cap=150.0)
    for key in ("startup_ratio", "per_step_ratio", "peak_memory_ratio"):
        summary[key] = max(c[key] for c in summary["models"].values())
    (out / "summary.json").write_text(json.dumps(summary, indent=1))
    table = report(summary)
    (out / "summary.md").write_text(table)
    print(table, end="")
    ratios = ", ".join(
        f"{k} {summary[k]:.3f}" for k in ("startup_ratio", "per_step_ratio", "peak_memory_ratio")
    )
    print(f"done: {out}/summary.json ({ratios}), summary.md")
    return 0


if __name__ == "__main__":
    sys.exit(main())
