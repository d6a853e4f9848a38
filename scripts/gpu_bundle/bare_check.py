"""Training steps on a bare GPU machine: what `bash DIR/run.sh` runs once the bundle is installed.

    bash DIR/run.sh [--out OUT] [--budget-s 500] [--passes memory,loop] [--launches grpo,dapo,...]
    bash DIR/run.sh --cpu --out OUT      # the same on a CPU, with the tiny model (the self-test)

run.sh installs the bundle's wheels and puts them and the project on PYTHONPATH; this script then
runs `python -m recipes.train` (verl's real trainer, FSDP2, Ray) with the rollout `hf`
(recipes/platforms/hf_rollout.py: transformers on the GPU; vLLM cannot travel in a bundle), in two
passes:

  memory  the first GPU run's preset (`first_gpu_run`) at one GPU's share of its batch (4 questions
          x 12 responses of up to 4,096 tokens, its 16,384-token micro-batches), 1 step, with a
          random-initialised model of its model's shape and vocabulary (DeepSeek-R1-Distill-Qwen-1.5B:
          1.78B parameters, 151,936 tokens). A random model seldom stops, so responses run to the
          limit: the worst case. torch's peak device memory of each phase (recipes/platforms/
          memory_probe.py) is set beside `recipes.plan`'s figure for it.
  loop    every method on the tiny model, 2 steps each, short responses: GRPO, DAPO and Dr. GRPO
          alone, then prompt augmentation, TA-GRPO, CW-GRPO and ProRL together (a reset forced at
          step 1); each launch ends in a checkpoint, `python -m eval.convert` of it and a load and
          greedy decode of the converted model.

Each launch gets what is left of --budget-s (seconds, over both passes); one that fails or runs
out of time is reported and the next still runs. OUT gets `results.json` and `table.md` after every
launch (partial results survive a kill), the runs under `runs/`, the models and data under `cache/`.
One line per launch, then `done: K of N launches passed; results in OUT/results.json` last.
Exit 0 when every launch passed, 1 otherwise, 2 on bad arguments.
What it measures and the results of earlier runs: docs/gpu.md.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
GIB = 2**30
PRESET = "first_gpu_run"
# DeepSeek-R1-Distill-Qwen-1.5B's config.json (Qwen2): the shape the memory pass trains, random
DISTILL_1_5B = {
    "hidden_size": 1536,
    "intermediate_size": 8960,
    "num_hidden_layers": 28,
    "num_attention_heads": 12,
    "num_key_value_heads": 2,
    "vocab_size": 151936,
    "max_position_embeddings": 131072,
    "rope_theta": 10000.0,
    "rms_norm_eps": 1e-6,
    "tie_word_embeddings": False,
}
MEMORY_QUESTIONS = 4  # the preset's 16 questions a step over its 4 GPUs
MEMORY_RESPONSES = MEMORY_QUESTIONS * 12  # its rollout.n (tests/test_bare_check.py holds it to the preset)
LOOP_RESPONSES = 4 * 8
# the last step's metrics that show each method's own machinery ran (a ProRL reset, TA-GRPO's
# pooled groups, CW-GRPO's weights, the templates' format score)
MECHANISM_PREFIXES = (
    "prorl/resets",
    "prorl/reset_trigger/",
    "ta_grpo/pooled",
    "actor/cw_grpo/weight_",
    "grader/format",
)
COMMON = [
    "actor_rollout_ref.rollout.name=hf",
    "recipes.deterministic=false",  # the hf rollout takes no per-request seed
    "trainer.n_gpus_per_node=1",
    "trainer.nnodes=1",
    "trainer.test_freq=-1",
    "trainer.val_before_train=false",
    "trainer.logger=[file]",
    "data=toy_arithmetic",
    "++ray_kwargs.ray_init.include_dashboard=false",  # the bundle's Ray has no dashboard build
]
# (name, methods, extra overrides) of the loop pass, in order
LOOP = [
    ("grpo", "[grpo]", []),
    ("dapo", "[dapo]", []),
    ("dr_grpo", "[dr_grpo]", []),
    (
        "all four",
        "[grpo,prompt_aug,ta_grpo,cw_grpo,prorl]",
        ["data.max_prompt_length=384", "recipes.prorl.reset_every=1", "recipes.prorl.min_gap=1"],
    ),
]
LOOP_STEPS = 2
# The GPU machine has no network: nothing may wait on a hub, a usage report or a logger's server.
OFFLINE_ENV = {
    "HF_HUB_OFFLINE": "1",
    "TRANSFORMERS_OFFLINE": "1",
    "HF_DATASETS_OFFLINE": "1",
    "RAY_USAGE_STATS_ENABLED": "0",
    "WANDB_MODE": "disabled",
}
MEMORY_SHARE = 0.55  # of the budget, when the loop pass follows


class BadArguments(Exception):
    """One sentence for the user (exit 2)."""


# ------------------------------------------------------------------------------------ models
def build_memory_model(out: Path, device: str) -> Path:
    """A random model with DeepSeek-R1-Distill-Qwen-1.5B's shape and a tokenizer of its vocabulary
    size: the tiny model's byte-level BPE padded with placeholder tokens to 151,936 entries, so
    that every id the model can sample decodes. Written once; bf16 weights (3.6 GB)."""
    if (out / "config.json").is_file() and (out / ".complete").is_file():
        return out
    import torch
    from transformers import GenerationConfig, Qwen2Config, Qwen2ForCausalLM

    from recipes.tools.models import IM_END, tiny_tokenizer

    tok = tiny_tokenizer()
    tok.add_tokens([f"<|r{i}|>" for i in range(DISTILL_1_5B["vocab_size"] - len(tok))])
    assert len(tok) == DISTILL_1_5B["vocab_size"], len(tok)
    eos = tok.convert_tokens_to_ids(IM_END)
    config = Qwen2Config(**DISTILL_1_5B, bos_token_id=None, eos_token_id=eos, pad_token_id=tok.pad_token_id)
    torch.manual_seed(0)
    with torch.device(device):
        model = Qwen2ForCausalLM(config).to(torch.bfloat16)
    model.generation_config = GenerationConfig(eos_token_id=eos, pad_token_id=tok.pad_token_id)
    tmp = out.with_name(out.name + ".tmp")
    shutil.rmtree(tmp, ignore_errors=True)  # our own unfinished build
    model.save_pretrained(tmp, safe_serialization=True)
    tok.save_pretrained(tmp)
    (tmp / ".complete").write_text("")
    tmp.rename(out)
    del model
    if device == "cuda":
        torch.cuda.empty_cache()
    return out


# ----------------------------------------------------------------------------------- launches
def memory_overrides(model: Path | None, cpu: bool) -> list[str]:
    """The memory pass: the preset at one GPU's share of its batch, one step, no checkpoint."""
    out = [
        f"experiment={PRESET}",
        *COMMON,
        f"data.train_batch_size={MEMORY_QUESTIONS}",
        f"actor_rollout_ref.actor.ppo_mini_batch_size={MEMORY_QUESTIONS}",
        "trainer.total_training_steps=1",
        "trainer.save_freq=-1",
    ]
    if cpu:  # the tiny model on the CPU platform; short responses (a CPU decodes slowly)
        return [*out, "platform=cpu", "model=tiny", "data.max_response_length=64"]
    return [*out, f"actor_rollout_ref.model.path={model}"]


def loop_overrides(methods: str, extra: list[str], cpu: bool) -> list[str]:
    return [
        f"platform={'cpu' if cpu else 'gpu'}",
        "model=tiny",
        f"method={methods}",
        *COMMON,
        "data.train_batch_size=4",
        "data.max_prompt_length=128",
        "data.max_response_length=32",
        "actor_rollout_ref.rollout.n=8",  # a multiple of 4: TA-GRPO's question + 3 rephrasings
        "actor_rollout_ref.actor.ppo_mini_batch_size=4",
        "actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu=32",
        "actor_rollout_ref.rollout.log_prob_micro_batch_size_per_gpu=32",
        "actor_rollout_ref.ref.log_prob_micro_batch_size_per_gpu=32",
        "actor_rollout_ref.actor.use_dynamic_bsz=false",
        f"trainer.total_training_steps={LOOP_STEPS}",
        f"trainer.save_freq={LOOP_STEPS}",
        *extra,
    ]


def train(overrides: list[str], run: Path, cache: Path, timeout_s: float) -> tuple[str, str | None, float]:
    """`python -m recipes.train` into `run`: (status, reason, seconds). Its console goes to
    run/console.txt; the phases' memory to run/memory.jsonl."""
    run.mkdir(parents=True, exist_ok=True)
    env = {
        **os.environ,
        "RECIPES_CACHE": str(cache),
        "RECIPES_MEMORY_LOG": str(run / "memory.jsonl"),
        "PYTHONUNBUFFERED": "1",
    }
    cmd = [sys.executable, "-m", "recipes.train", *overrides, f"recipes.output_dir={run}"]
    (run / "command.txt").write_text(" ".join(cmd) + "\n")
    start = time.monotonic()
    with open(run / "console.txt", "w") as console:
        proc = subprocess.Popen(
            cmd, cwd=REPO, env=env, stdout=console, stderr=subprocess.STDOUT, start_new_session=True
        )
        try:
            code = proc.wait(timeout=max(timeout_s, 1))
        except subprocess.TimeoutExpired:
            _end(proc)
            return "fail", f"not finished in {timeout_s:.0f} s (the budget)", time.monotonic() - start
    seconds = time.monotonic() - start
    text = (run / "console.txt").read_text(errors="replace")
    if code == 0 and "\ndone:" in "\n" + text:
        return "pass", None, seconds
    return "fail", f"exit {code}: {_last_error(text, run)}", seconds


def _end(proc: subprocess.Popen) -> None:
    """Stop a launch and everything it started (its own process group: Ray's processes too)."""
    import signal

    for sig, wait in ((signal.SIGTERM, 20), (signal.SIGKILL, 10)):
        try:
            os.killpg(proc.pid, sig)
        except ProcessLookupError:
            return
        try:
            proc.wait(timeout=wait)
            return
        except subprocess.TimeoutExpired:
            continue


def _last_error(console: str, run: Path) -> str:
    """The most telling line of a failed launch: its `config error:` line, else the last line that
    names an error in the console or the run's log."""
    logs = sorted((run / "logs").glob("*.log"))
    texts = [console] + [p.read_text(errors="replace") for p in logs[-1:]]
    for text in texts:
        for line in text.splitlines():
            if line.startswith("config error:"):
                return line.strip()[:400]
    for text in reversed(texts):
        hits = [ln for ln in text.splitlines() if "Error" in ln or "error:" in ln or "Traceback" in ln]
        if hits:
            return hits[-1].strip()[:400]
    tail = [ln for ln in console.splitlines() if ln.strip()]
    return tail[-1][:400] if tail else "no output"


# ------------------------------------------------------------------------------------ figures
PHASE_TIMES = {  # verl's timers -> our phase names
    "timing_s/gen": "generation",
    "timing_s/old_log_prob": "old log-prob",
    "timing_s/ref": "ref log-prob",
    "timing_s/update_actor": "update",
    "timing_s/step": "step",
}


def step_figures(run: Path, responses: int) -> dict:
    """From the run's metrics: steps done, median seconds of each phase (steps 2+ when there are
    two), tokens per second of the update (verl's) and of the rollout (`responses` a step)."""
    import statistics

    rows = []
    for path in sorted((run / "metrics").glob("*.jsonl")):
        for line in path.read_text().splitlines():
            try:
                rows.append(json.loads(line)["data"])
            except (ValueError, KeyError, TypeError):
                continue
    if not rows:
        return {"steps": 0}
    later = rows[1:] or rows  # the first step carries the start-up (compilation, allocator growth)
    seconds = {
        phase: round(statistics.median(r[key] for r in later), 2)
        for key, phase in PHASE_TIMES.items()
        if all(key in r for r in later)
    }
    out = {"steps": len(rows), "seconds": seconds}
    last = rows[-1]
    if "perf/throughput" in last:  # verl's: prompt and response tokens of the step per second and GPU
        out["train_tokens_per_s"] = round(float(last["perf/throughput"]), 1)
    out["mechanisms"] = {k: round(float(v), 4) for k, v in last.items() if k.startswith(MECHANISM_PREFIXES)}
    templates = {k.split("/")[1] for k in last if k.startswith("template/")}
    if templates:
        out["mechanisms"]["templates drawn"] = len(templates)
    if last.get("timing_s/gen") and "response_length/mean" in last:
        generated = float(last["response_length/mean"]) * responses
        out["response_length_mean"] = round(float(last["response_length/mean"]), 1)
        out["generated_tokens_per_s"] = round(generated / float(last["timing_s/gen"]), 1)
    return out


def memory_figures(run: Path) -> dict:
    """GiB per phase from run/memory.jsonl: each phase's largest peak; `held during generation`:
    what the trainer had allocated when the first phase after the rollout began."""
    path = run / "memory.jsonl"
    if not path.is_file():
        return {}
    lines = [json.loads(x) for x in path.read_text().splitlines() if x.strip()]
    out: dict[str, float] = {}
    for line in lines:
        value = line["peak"] if line["device"] == "cuda" else line["rss"]
        out[line["phase"]] = max(out.get(line["phase"], 0.0), value / GIB)
    trainer = [x for x in lines if x["phase"] != "generation"]
    if trainer and trainer[0]["device"] == "cuda":
        out["trainer held during generation"] = trainer[0]["before"] / GIB
    return {k: round(v, 2) for k, v in out.items()}


def plan_figures(overrides: list[str], run: Path, gpu_gib: float) -> dict:
    """`recipes.plan`'s GiB for the phases the probe measures (the training phase's totals at the
    update and the log-prob pass less the CUDA context, which torch does not count; the actor's
    resident parameters and Adam states during the rollout) and its seconds a step."""
    from recipes import plan
    from recipes.train import compose

    # planned as packed: the random model writes every response to its limit, so no micro-batch
    # holds padding whatever attention the run used (recipes/plan.py's sdpa figures assume spread lengths)
    cfg = compose([*overrides, f"recipes.output_dir={run}", "recipes.attention=flash"])
    e = plan.estimate(cfg, gpu_gib=gpu_gib)
    held = next(r[1] for r in e.rows if r[0].startswith("actor parameters")) + next(
        r[1] for r in e.rows if r[0].startswith("Adam states")
    )
    figures = {
        "update": e.passes_gib["update"] - plan.CUDA_CONTEXT_GIB,
        "log-prob": e.passes_gib["log-prob"] - plan.CUDA_CONTEXT_GIB,
        "trainer held during generation": held,
    }
    out = {k: round(v, 2) for k, v in figures.items()}
    if e.step_s is not None:
        out["step_s"] = round(e.step_s, 1)
    return out


def compare(measured: dict, planned: dict) -> dict:
    """measured / planned for each phase both have (the log-prob passes against the plan's one)."""
    pairs = {
        "update": "update",
        "ref log-prob": "log-prob",
        "old log-prob": "log-prob",
        "trainer held during generation": "trainer held during generation",
    }
    return {
        phase: round(measured[phase] / planned[key], 2)
        for phase, key in pairs.items()
        if phase in measured and planned.get(key)
    }


def convert_and_load(run: Path) -> tuple[str, str | None]:
    """eval.convert the run's checkpoints, then load the converted model and decode a few tokens."""
    done = subprocess.run(
        [sys.executable, "-m", "eval.convert", str(run / "checkpoints")],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=300,
    )
    if done.returncode != 0:
        return "fail", f"eval.convert exit {done.returncode}: {(done.stderr or done.stdout).strip()[-300:]}"
    folder = run / "hf" / f"global_step_{LOOP_STEPS}"
    code = (
        "import sys, torch; from transformers import AutoModelForCausalLM, AutoTokenizer;"
        "from recipes.platforms.hf_rollout import decode;"
        "m = AutoModelForCausalLM.from_pretrained(sys.argv[1]); t = AutoTokenizer.from_pretrained(sys.argv[1]);"
        "ids = t.apply_chat_template([{'role': 'user', 'content': 'What is 2 + 3?'}], add_generation_prompt=True);"
        "ids = ids['input_ids'] if hasattr(ids, 'keys') else ids;"
        "out = decode(m, [list(ids)], [16], temperature=0.0, top_p=1.0, top_k=-1,"
        " stop_ids=[t.eos_token_id], pad_id=t.pad_token_id)[0][0];"
        "print('decoded:', repr(t.decode(out)))"
    )
    load = subprocess.run(
        [sys.executable, "-c", code, str(folder)], cwd=REPO, capture_output=True, text=True, timeout=300
    )
    if load.returncode != 0:
        return "fail", f"loading {folder}: {(load.stderr or load.stdout).strip()[-300:]}"
    return "pass", load.stdout.strip()[-200:]


# ------------------------------------------------------------------------------------ report
def machine(cpu: bool) -> dict:
    import torch

    info = {
        "python": platform.python_version(),
        "torch": torch.__version__,
        "cuda": torch.version.cuda,
        "cpus": os.cpu_count(),
        "device": "cpu" if cpu else torch.cuda.get_device_name(0),
    }
    if not cpu:
        info["gpu_gib"] = round(torch.cuda.get_device_properties(0).total_memory / GIB, 1)
        smi = shutil.which("nvidia-smi")
        if smi:
            got = subprocess.run(
                [smi, "--query-gpu=driver_version", "--format=csv,noheader"], capture_output=True, text=True
            )
            info["driver"] = got.stdout.strip()
    import transformers
    import verl

    info["verl"], info["transformers"] = verl.__version__, transformers.__version__
    return info


def write_report(out: Path, report: dict) -> None:
    tmp = out / "results.json.tmp"
    tmp.write_text(json.dumps(report, indent=1) + "\n")
    tmp.replace(out / "results.json")
    (out / "table.md").write_text(table(report))


def table(report: dict) -> str:
    m = report["machine"]
    lines = [
        f"{m['device']}, {m.get('gpu_gib', '-')} GiB; Python {m['python']}, torch {m['torch']}, "
        f"verl {m['verl']}, transformers {m['transformers']}; budget {report['budget_s']} s",
        "",
        "| launch | methods | status | s/step: step (gen, ref, old, update) | train tok/s | "
        f"peak GiB by phase ({'RSS, ' if m['device'] == 'cpu' else ''}measured / plan) | convert + load | reason |",
        "|---|---|---|---|---:|---|---|---|",
    ]
    for r in report["rows"]:
        s = r.get("figures", {}).get("seconds", {})
        parts = [s.get(k) for k in ("generation", "ref log-prob", "old log-prob", "update")]
        times = (
            f"{s.get('step', '-')} ({', '.join('-' if p is None else str(p) for p in parts)})" if s else "-"
        )
        mem = r.get("memory_gib", {})
        plan = r.get("plan_gib", {})
        cells = []
        for phase, value in mem.items():
            key = "log-prob" if phase.endswith("log-prob") else phase
            cells.append(f"{phase} {value}" + (f" / {plan[key]}" if key in plan else ""))
        lines.append(
            f"| {r['name']} | {r['methods']} | {r['status']} | {times} | "
            f"{r.get('figures', {}).get('train_tokens_per_s', '-')} | {'; '.join(cells) or '-'} | "
            f"{r.get('convert', '-')} | {(r.get('reason') or '').replace('|', '/')} |"
        )
    return "\n".join(lines) + "\n"


def say(row: dict) -> None:
    s = row.get("figures", {}).get("seconds", {})
    ratio = row.get("measured_over_plan", {})
    bits = [f"{row['name']:<8} {row['status']:<4}"]
    if s:
        bits.append(f"{s.get('step', '-')} s/step")
    if row.get("memory_gib"):
        bits.append("peak GiB " + ", ".join(f"{k} {v}" for k, v in row["memory_gib"].items()))
    if ratio:
        bits.append("measured/plan " + ", ".join(f"{k} {v}x" for k, v in ratio.items()))
    if row.get("reason"):
        bits.append(row["reason"])
    print(" | ".join(bits), flush=True)


# ------------------------------------------------------------------------------------ main
def run_all(args) -> int:
    os.environ.update(OFFLINE_ENV)  # inherited by every launch, conversion and load
    out = Path(args.out).resolve()
    cache = out / "cache"
    cache.mkdir(parents=True, exist_ok=True)
    deadline = time.monotonic() + args.budget_s
    device = "cpu" if args.cpu else "cuda"
    import torch

    if not args.cpu and not torch.cuda.is_available():
        raise BadArguments(
            "no GPU visible to torch (torch.cuda.is_available() is False); --cpu runs on the CPU."
        )
    report = {"machine": machine(args.cpu), "budget_s": args.budget_s, "rows": [], "finished": False}
    print(
        f"bare check: {report['machine']['device']}, torch {report['machine']['torch']}, verl "
        f"{report['machine']['verl']}; budget {args.budget_s} s; results in {out}",
        flush=True,
    )
    gpu_gib = report["machine"].get("gpu_gib", 80.0)
    launches = []
    if "memory" in args.passes:
        launches.append(("memory", "[grpo]", "memory"))
    if "loop" in args.passes:
        launches += [(name, methods, "loop") for name, methods, _ in LOOP if name in args.launches]
    for name, methods, kind in launches:
        row = {"name": name, "methods": methods, "pass": kind}
        left = deadline - time.monotonic()
        if left < 30:
            row.update(status="fail", reason=f"not run: {max(left, 0):.0f} s of the budget left")
        else:
            run = out / "runs" / name.replace(" ", "_")
            try:
                if kind == "memory":
                    model = (
                        None
                        if args.cpu
                        else build_memory_model(cache / "models" / "distill_1_5b_random", device)
                    )
                    overrides = memory_overrides(model, args.cpu)
                else:
                    extra = next(e for n, _, e in LOOP if n == name)
                    overrides = loop_overrides(methods, extra, args.cpu)
                left = deadline - time.monotonic()
                # the memory pass leaves the loop's four launches 45% of the budget (each took
                # 60-105 s on 2 CPU cores in the self-test, mostly start-up); they share what is left
                share = left * MEMORY_SHARE if kind == "memory" and "loop" in args.passes else left
                status, reason, seconds = train(overrides, run, cache, share)
                row.update(status=status, reason=reason, wall_s=round(seconds, 1), overrides=overrides)
                row["figures"] = step_figures(run, MEMORY_RESPONSES if kind == "memory" else LOOP_RESPONSES)
                row["memory_gib"] = memory_figures(run)
                if kind == "memory" and not args.cpu:
                    os.environ.setdefault("RECIPES_CACHE", str(cache))
                    row["plan_gib"] = plan_figures(overrides, run, gpu_gib)
                    row["measured_over_plan"] = compare(row["memory_gib"], row["plan_gib"])
                if kind == "loop" and status == "pass":
                    row["convert"], detail = convert_and_load(run)
                    if row["convert"] != "pass":
                        row.update(status="fail", reason=detail)
                    else:
                        row["decoded"] = detail
            except Exception as exc:  # noqa: BLE001 - reported in its row; the next launch still runs
                row.update(status="fail", reason=f"{type(exc).__name__}: {exc}"[:400])
        report["rows"].append(row)
        write_report(out, report)
        say(row)
    report["finished"] = True
    write_report(out, report)
    passed = sum(r["status"] == "pass" for r in report["rows"])
    print(
        f"done: {passed} of {len(report['rows'])} launches passed; results in {out / 'results.json'}, "
        f"table in {out / 'table.md'}",
        flush=True,
    )
    return 0 if passed == len(report["rows"]) else 1


def parse(argv: list[str]) -> argparse.Namespace:
    p = argparse.ArgumentParser(
        prog="bash DIR/run.sh",
        description="Train every method through verl's real trainer on a bare GPU (docs/gpu.md).",
    )
    p.add_argument("--out", default="bare_check", help="results folder (default ./bare_check)")
    p.add_argument(
        "--budget-s",
        type=float,
        default=None,
        help="seconds for all launches (default 500; with --cpu 1800: 2 CPU cores take ~90 s a launch)",
    )
    p.add_argument("--cpu", action="store_true", help="run on the CPU with the tiny model (the self-test)")
    p.add_argument("--passes", default="memory,loop", help="which passes: memory, loop (default both)")
    names = ",".join(n.replace(" ", "_") for n, _, _ in LOOP)
    p.add_argument("--launches", default=names, help=f"the loop pass's launches (default {names})")
    args = p.parse_args(argv)
    args.passes = [x for x in args.passes.split(",") if x]
    args.launches = [x.replace("_", " ") if x == "all_four" else x for x in args.launches.split(",") if x]
    if not args.passes or set(args.passes) - {"memory", "loop"}:
        raise BadArguments(f"--passes {','.join(args.passes)}: a comma-separated list of memory, loop.")
    unknown = set(args.launches) - {n for n, _, _ in LOOP}
    if unknown:
        raise BadArguments(f"--launches: unknown {', '.join(sorted(unknown))}; known: {names}.")
    if args.budget_s is None:
        args.budget_s = 1800.0 if args.cpu else 500.0
    if not args.budget_s > 0:
        raise BadArguments(f"--budget-s {args.budget_s}: seconds, more than 0.")
    out = Path(args.out)
    if out.exists() and (not out.is_dir() or any(p.name != "cache" for p in out.iterdir())):
        raise BadArguments(f"--out {out}: holds files already; give a new or empty folder.")
    return args


def main(argv: list[str]) -> int:
    try:
        args = parse(argv)
        return run_all(args)
    except BadArguments as exc:
        print(f"bare check: {exc}", file=sys.stderr, flush=True)
        return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
