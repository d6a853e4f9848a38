"""The Python half of scripts/gpu_smoke.sh: which presets to run and with which overrides, the few
eval questions, and each run's result line and the summary table. Run as a file.

    python scripts/gpu_smoke.py plan [--models-dir M --data-dir D] --out-dir O --gpus N [--presets a,b]
    python scripts/gpu_smoke.py downloads [--presets a,b] [--smoke]  # what is missing from the caches
    python scripts/gpu_smoke.py downloads MODELS_DIR DATA_DIR       # commands that fill both folders
    python scripts/gpu_smoke.py questions VAL.parquet OUT.jsonl [--n 8]
    python scripts/gpu_smoke.py result --preset P --run-dir R --train-rc 0 ... --results F
    python scripts/gpu_smoke.py table RESULTS.jsonl

The presets are every file in configs/experiment/ whose platform is not `cpu` (its defaults list,
following parent presets as Hydra does), each scaled down by the same overrides (the constants
below), with the preset's model or a smaller one of its series (STAND_INS) and its data read where
every preset's Slurm job reads them: the model by its hub id from the Hugging Face cache ($HF_HOME),
the data from $RECIPES_CACHE/data/<dataset>/{train,test}.parquet. The older form names two folders
instead: MODELS_DIR/<name> and DATA_DIR/<dataset>/ (DATA_DIR is what $RECIPES_CACHE/data is to the
presets). Each preset's line in the plan says whether all it reads is here (then the run sets
HF_HUB_OFFLINE=1), what it downloads, or why it is skipped (recipes.platforms.gpu.inputs, the same
decision train.sbatch makes). A preset passes when training exited 0
and logged both steps and the conversion and the evaluation exited 0; its figures (s/step, peak,
plan, actor GiB, tokens/s, eval) come from the run's files, a missing one shown as `-` without
failing it (the verdict, the line and the table are scripts/gpu_smoke_results.py). `table` exits 1
unless every preset passed; an error exits 2. What each figure measures:
docs/slurm.md#what-the-smoke-run-does-scriptsgpu_smokesh.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from dataclasses import asdict, dataclass, field
from pathlib import Path

# the results half (judge, line, table); the script's folder is on sys.path when it runs as a file,
# not when a test loads it with tests/script_module.py
sys.path.insert(0, str(Path(__file__).resolve().parent))
from gpu_smoke_results import (  # noqa: E402, F401  (names of this script's interface)
    COLUMNS,
    STEPS,
    Result,
    eval_accuracy,
    gpu_peak_gib,
    judge,
    line,
    planned_gib,
    read_metrics,
    table,
)

REPO = Path(__file__).resolve().parents[1]
CONFIGS = REPO / "configs"
ROLLOUT_N = 8  # responses per question; a TA-GRPO preset gets (N+1) x 2 when that is more (rollout_n)
RESPONSE_TOKENS = 256
VAL_QUESTIONS = 8
EVAL_QUESTIONS = 8
GPU_MEMORY = 0.5  # vLLM's share while training (rollout) and evaluating

# model config -> (folder under MODELS_DIR, hub id to download it from). Full fine-tuning with
# AdamW keeps about 16 bytes a parameter on the GPUs (weights, gradients, two moments in fp32),
# so 1.5-1.7B models (about 27 GB) fit one 80 GB GPU beside vLLM; the 3-7B ones get the smallest
# model of their own series.
STAND_INS: dict[str, tuple[str, str]] = {
    "qwen2_5_math_1_5b": ("Qwen2.5-Math-1.5B", "Qwen/Qwen2.5-Math-1.5B"),
    "qwen2_5_math_7b_instruct": ("Qwen2.5-Math-1.5B-Instruct", "Qwen/Qwen2.5-Math-1.5B-Instruct"),
    "deepseek_r1_distill_qwen_1_5b": (
        "DeepSeek-R1-Distill-Qwen-1.5B",
        "deepseek-ai/DeepSeek-R1-Distill-Qwen-1.5B",
    ),
    "qwen3_1_7b": ("Qwen3-1.7B", "Qwen/Qwen3-1.7B"),
    "qwen3_4b": ("Qwen3-1.7B", "Qwen/Qwen3-1.7B"),
    "llama3_2_1b": ("Llama-3.2-1B-Instruct", "meta-llama/Llama-3.2-1B-Instruct"),
    "llama3_2_3b": ("Llama-3.2-1B-Instruct", "meta-llama/Llama-3.2-1B-Instruct"),
}
# Models recipes.tools.models builds locally (no folder needed): the preset's own path is kept.
LOCAL_MODELS = ("tiny", "smollm2_135m")
# Overrides that make a method's own machinery run within 2 steps.
METHOD_EXTRA: dict[str, list[str]] = {
    # a reference + optimizer reset after step 1 (the reset worker runs on the GPUs at step 2)
    "prorl": ["recipes.prorl.reset_every=1", "recipes.prorl.min_gap=1"],
}
DATA_PREFIX = "${recipes.cache_dir}/data/"
SEP = "\x1f"  # between the fields of a `plan` line (ASCII unit separator: empty fields survive `read`)


class SmokeError(Exception):
    """Bad input, said in one sentence (exit 2)."""


# --------------------------------------------------------------------------------- presets
def _yaml(path: Path) -> dict:
    import yaml

    try:
        return yaml.safe_load(path.read_text()) or {}
    except (OSError, yaml.YAMLError) as exc:
        raise SmokeError(f"cannot read {path}: {exc}") from None


_GROUPS = {
    "platform": "platform",
    "model@actor_rollout_ref.model": "model",
    "data@data": "data",
    "method": "methods",
}


def choices(preset: str, _seen: tuple[str, ...] = ()) -> dict:
    """The platform, model, data and method choices a preset composes to, from the defaults lists
    of configs/train.yaml and of the preset and its parents (later entries win, as in Hydra)."""
    if preset in _seen:
        raise SmokeError(f"experiment presets include each other in a loop: {' -> '.join((*_seen, preset))}")
    path = CONFIGS / "experiment" / f"{preset}.yaml"
    if not path.is_file():
        raise SmokeError(f"no preset {preset!r} (configs/experiment/{preset}.yaml)")
    out: dict = {"platform": None, "model": None, "data": None, "methods": None}
    if not _seen:
        for entry in _yaml(CONFIGS / "train.yaml").get("defaults", []):
            if isinstance(entry, dict):
                for key, value in entry.items():
                    if key in _GROUPS:
                        out[_GROUPS[key]] = value
    for entry in _yaml(path).get("defaults", []):
        if isinstance(entry, str):
            if entry != "_self_":
                parent = choices(entry, (*_seen, preset))
                out.update({k: v for k, v in parent.items() if v is not None})
            continue
        for key, value in entry.items():
            group = key.removeprefix("override ").lstrip("/")
            if group in _GROUPS:
                out[_GROUPS[group]] = value
    if isinstance(out["methods"], str):
        out["methods"] = [out["methods"]]
    return out


def _chain(preset: str) -> list[Path]:
    """The preset's file after its parents' (the order in which Hydra merges them, `_self_` last)."""
    path = CONFIGS / "experiment" / f"{preset}.yaml"
    parents = [e for e in _yaml(path).get("defaults", []) if isinstance(e, str) and e != "_self_"]
    return [f for parent in parents for f in _chain(parent)] + [path]


def preset_value(preset: str, key: str):
    """A dotted key's value as the preset composes it from its methods' configs, its parents and
    itself (later wins, as in Hydra); None when none sets it. (`choices` has checked for loops.)"""
    files = [CONFIGS / "method" / f"{m}.yaml" for m in choices(preset)["methods"] or []] + _chain(preset)
    found = None
    for path in files:
        value = _yaml(path)
        for part in key.split("."):
            value = value.get(part) if isinstance(value, dict) else None
        found = found if value is None else value
    return found


def rollout_n(preset: str) -> int:
    """Responses per question in the smoke run: ROLLOUT_N, or for TA-GRPO 2 for each of a question's
    N+1 variants when that is more (its per-variant groups need G >= 2, its rows N+1 variants)."""
    if "ta_grpo" not in (choices(preset)["methods"] or []):
        return ROLLOUT_N
    variants = int(preset_value(preset, "recipes.ta_grpo.n_rephrasings") or 0) + 1
    return max(ROLLOUT_N, 2 * variants)


def gpu_presets() -> list[str]:
    """Every preset in configs/experiment/ that does not run on platform=cpu, sorted."""
    names = sorted(p.stem for p in (CONFIGS / "experiment").glob("*.yaml"))
    return [n for n in names if choices(n)["platform"] != "cpu"]


def default_data_dir() -> Path:
    """Where the presets read their data: $RECIPES_CACHE/data (configs/train.yaml's cache_dir)."""
    from recipes.files import cache_dir

    return cache_dir() / "data"


def model_hub_id(name: str) -> str | None:
    """The hub id a model config trains (its `path`), or None for a local model."""
    path = _yaml(CONFIGS / "model" / f"{name}.yaml").get("path")
    return path if isinstance(path, str) and "${" not in path else None


def data_files(name: str, data_dir: Path) -> tuple[Path, Path]:
    """(train, val) parquet files of data config `name` under data_dir (in place of
    ${recipes.cache_dir}/data/)."""
    cfg = _yaml(CONFIGS / "data" / f"{name}.yaml")
    out = []
    for key in ("train_files", "val_files"):
        value = cfg.get(key)
        if not isinstance(value, str) or not value.startswith(DATA_PREFIX):
            raise SmokeError(f"configs/data/{name}.yaml: {key} is not one file under {DATA_PREFIX}")
        out.append(data_dir / value.removeprefix(DATA_PREFIX))
    return out[0], out[1]


def batch_size(gpus: int) -> int:
    """Questions per step: at least 4, a multiple of the GPU count, so that every batch rule of
    recipes.train holds (mini-batch x rollout.n divisible by the workers, micro-batch 8 dividing
    each worker's share)."""
    return gpus * math.ceil(4 / gpus)


@dataclass
class Plan:
    preset: str
    model: str
    data: str
    val_file: str
    overrides: list[str] = field(default_factory=list)
    problem: str = ""
    hub: str = ""  # recipes.offline's line: `offline: ...` (HF_HUB_OFFLINE=1) or `online: ...`


def plan(
    models_dir: Path | None,
    data_dir: Path | None,
    out_dir: Path,
    gpus: int,
    attn: str,
    only: list[str] | None = None,
) -> list[Plan]:
    """Each preset's run. models_dir None: the models by hub id from the Hugging Face cache;
    data_dir None: $RECIPES_CACHE/data (where the presets' own Slurm jobs read both)."""
    import functools

    from recipes.platforms import gpu as gpu_platform

    if not 1 <= gpus <= 8:
        raise SmokeError(f"GPUS must be 1 to 8 (one node), got {gpus}")
    presets = gpu_presets()
    if only:
        unknown = [p for p in only if p not in presets]
        if unknown:
            raise SmokeError(f"not a GPU preset: {', '.join(unknown)} (known: {', '.join(presets)})")
        presets = [p for p in presets if p in only]
    b = batch_size(gpus)
    data_dir = default_data_dir() if data_dir is None else data_dir
    reachable = functools.cache(gpu_platform.hub_reachable)  # asked once, and only if a model is missing
    plans = []
    for preset in presets:
        c = choices(preset)
        problems, hub = [], ""
        model, data = c["model"], c["data"]
        overrides = [f"experiment={preset}", "platform=gpu"]
        train, val = data_files(data, data_dir)
        if model in STAND_INS:
            folder, hub_id = STAND_INS[model]
            path = hub_id if models_dir is None else str(models_dir / folder)
            hint = "" if models_dir is None else f"hf download {hub_id} --local-dir {path}"
            overrides.append(f"actor_rollout_ref.model.path={path}")
            found = gpu_platform.inputs(path, (train, val), reachable, hint)
            if found.ok:
                hub = found.line()
            else:
                problems.append(found.line())
        elif model in LOCAL_MODELS:  # recipes.train builds it, with no hub access: only the data to check
            problems += gpu_platform.missing_data((train, val))
            hub = "" if problems else "offline: a model recipes.train builds here, and local data"
        else:
            problems.append(f"model {model!r} has no stand-in in scripts/gpu_smoke.py STAND_INS")
        overrides += [f"data.train_files={train}", f"data.val_files={val}"]
        overrides += [
            f"trainer.n_gpus_per_node={gpus}",
            "trainer.nnodes=1",
            f"trainer.total_training_steps={STEPS}",
            f"trainer.save_freq={STEPS}",
            f"trainer.test_freq={STEPS}",
            "trainer.val_before_train=false",
            "trainer.resume_mode=disable",
            "trainer.logger=[console,file]",
            f"data.train_batch_size={b}",
            f"data.val_max_samples={VAL_QUESTIONS}",
            f"data.max_response_length={RESPONSE_TOKENS}",
            f"actor_rollout_ref.actor.ppo_mini_batch_size={b}",
            f"actor_rollout_ref.rollout.n={rollout_n(preset)}",
            f"actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu={ROLLOUT_N}",
            f"actor_rollout_ref.ref.log_prob_micro_batch_size_per_gpu={ROLLOUT_N}",
            f"actor_rollout_ref.rollout.log_prob_micro_batch_size_per_gpu={ROLLOUT_N}",
            f"actor_rollout_ref.rollout.gpu_memory_utilization={GPU_MEMORY}",
            f"recipes.output_dir={out_dir / preset / 'run'}",
        ]
        for method in c["methods"] or []:
            overrides += METHOD_EXTRA.get(method, [])
        overrides.append(f"recipes.attention={attn}")  # auto: flash-attn if it imports, else sdpa
        plans.append(Plan(preset, model, data, str(val), overrides, "; ".join(problems), hub))
    return plans


def downloads(models_dir: Path, data_dir: Path) -> list[str]:
    """Shell lines that fill MODELS_DIR and DATA_DIR for the smoke run (the older form; run on a
    machine with internet)."""
    from recipes.platforms.gpu import data_hint

    models, datasets = {}, {}
    for preset in gpu_presets():
        c = choices(preset)
        if c["model"] in STAND_INS:
            folder, hub = STAND_INS[c["model"]]
            models[folder] = hub
        train, val = data_files(c["data"], data_dir)
        for f in (train, val):
            datasets[f.parent.name] = True
    lines = [f"hf download {hub} --local-dir {models_dir / folder}" for folder, hub in sorted(models.items())]
    for name in sorted(datasets):
        if name.endswith("_rephrased"):
            lines.append(f"# {name}: {data_hint(data_dir / name)}")
        else:
            lines.append(f"python -m recipes.tools.data prepare {name} --out {data_dir / name}")
    return lines


def cache_downloads(only: list[str] | None = None, smoke_only: bool = False) -> list[str]:
    """Shell lines that put into the caches what is not there yet: each model by its hub id into
    the Hugging Face cache ($HF_HOME), each dataset into $RECIPES_CACHE/data. The models are every
    GPU preset's own (what its Slurm job trains) and its smoke stand-in, or only the stand-ins with
    smoke_only. What is already there is a `#` line. Run on a machine with internet, with the
    HF_HOME and RECIPES_CACHE of the jobs."""
    from recipes.platforms.gpu import data_hint, hub_cache, hub_snapshot

    presets = gpu_presets()
    if only:
        unknown = [p for p in only if p not in presets]
        if unknown:
            raise SmokeError(f"not a GPU preset: {', '.join(unknown)} (known: {', '.join(presets)})")
        presets = [p for p in presets if p in only]
    data_dir = default_data_dir()
    models: dict[str, None] = {}
    datasets: dict[Path, set[str]] = {}
    for preset in presets:
        c = choices(preset)
        own = model_hub_id(c["model"]) if c["model"] not in LOCAL_MODELS else None
        stand_in = STAND_INS[c["model"]][1] if c["model"] in STAND_INS else None
        for hub in (stand_in,) if smoke_only else (own, stand_in):
            if hub:
                models[hub] = None
        for f in data_files(c["data"], data_dir):
            datasets.setdefault(f.parent, set()).add(f.name)
    lines = [f"# models into the Hugging Face cache {hub_cache()}, data into {data_dir}"]
    if any(m.startswith("meta-llama/") for m in models if hub_snapshot(m) is None):
        lines.append(
            "# meta-llama models are gated: accept their license on huggingface.co, then `hf auth login`"
        )
    for hub in sorted(models):
        snapshot = hub_snapshot(hub)
        lines.append(f"# cached: {hub} ({snapshot})" if snapshot else f"hf download {hub}")
    for folder, names in sorted(datasets.items()):
        if all((folder / name).is_file() for name in names):
            lines.append(f"# ready: {folder}")
        elif folder.name.endswith("_rephrased"):
            lines.append(f"# {folder.name}: {data_hint(folder)}")
        else:
            lines.append(f"python -m recipes.tools.data prepare {folder.name} --out {folder}")
    return lines


def write_questions(parquet: Path, out: Path, n: int) -> int:
    """The first n rows of a data file as eval.run's local JSONL (problem, answer)."""
    import pyarrow.parquet as pq

    if not parquet.is_file():
        raise SmokeError(f"no such data file {parquet}")
    rows = pq.read_table(parquet).slice(0, n).to_pylist()
    out.parent.mkdir(parents=True, exist_ok=True)
    with open(out, "w") as f:
        for row in rows:
            problem = (row.get("extra_info") or {}).get("question")
            answer = (row.get("reward_model") or {}).get("ground_truth")
            if problem is None or answer is None:
                raise SmokeError(f"{parquet}: a row without extra_info.question or reward_model.ground_truth")
            f.write(json.dumps({"problem": problem, "answer": answer}) + "\n")
    return len(rows)


# --------------------------------------------------------------------------------- results
def read_results(path: Path) -> list[Result]:
    """The Results of a file that `result` appended to (one JSON object a line; unknown keys are
    dropped)."""
    if not path.is_file():
        raise SmokeError(f"no results file {path}")
    fields = set(Result.__dataclass_fields__)
    return [
        Result(**{k: v for k, v in json.loads(ln).items() if k in fields})
        for ln in path.read_text().splitlines()
        if ln.strip()
    ]


# --------------------------------------------------------------------------------- CLI
def _rc(text: str) -> int | None:
    return None if text in ("", "-") else int(text)


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python scripts/gpu_smoke.py", description=__doc__.split("\n\n")[0])
    sub = p.add_subparsers(dest="cmd", required=True)
    s = sub.add_parser(
        "plan",
        help="one line per preset: preset, problem, HF_HUB_OFFLINE decision, val file, overrides... "
        "(separated by \\x1f)",
    )
    s.add_argument(
        "--models-dir", help="one folder per model (default: hub ids, from the Hugging Face cache)"
    )
    s.add_argument("--data-dir", help="DATA_DIR/<dataset>/ (default: $RECIPES_CACHE/data)")
    s.add_argument("--out-dir", required=True)
    s.add_argument("--gpus", type=int, required=True)
    s.add_argument("--attn", choices=("auto", "flash", "sdpa"), default="auto")
    s.add_argument("--presets", default="", help="comma-separated subset (default: every GPU preset)")
    s = sub.add_parser(
        "downloads",
        help="[--presets a,b] [--smoke]: the commands that fetch what the GPU presets (and their smoke "
        "stand-ins) need and the caches lack (HF_HOME, RECIPES_CACHE); with MODELS_DIR DATA_DIR, those "
        "that fill the two folders",
    )
    s.add_argument("models_dir", nargs="?")
    s.add_argument("data_dir", nargs="?")
    s.add_argument("--presets", default="", help="comma-separated subset (default: every GPU preset)")
    s.add_argument("--smoke", action="store_true", help="only the smoke run's models, not the presets' own")
    s = sub.add_parser("questions", help="the first N rows of a data file as eval.run's JSONL")
    s.add_argument("parquet")
    s.add_argument("out")
    s.add_argument("--n", type=int, default=EVAL_QUESTIONS)
    s = sub.add_parser("result", help="judge one preset's run, print its line, append it to --results")
    s.add_argument("--preset", required=True)
    s.add_argument("--run-dir", required=True)
    s.add_argument("--train-rc", type=_rc, default=None)
    s.add_argument("--convert-rc", type=_rc, default=None)
    s.add_argument("--eval-rc", type=_rc, default=None)
    s.add_argument("--eval-dir")
    s.add_argument("--gpu-log")
    s.add_argument("--skip", default="", help="the preset was not run, for this reason")
    s.add_argument(
        "--gpu-gib", type=float, default=None, help="one GPU's memory, for the plan (default H100)"
    )
    s.add_argument("--results", required=True, help="JSONL file the result is appended to")
    s = sub.add_parser("table", help="the summary table of a results file (exit 1 unless all passed)")
    s.add_argument("results")
    return p


def _print_plan(args: argparse.Namespace) -> None:
    """`plan`: one SEP-joined line per preset (gpu_smoke.sh reads them with `read`)."""
    only = [x.strip() for x in args.presets.split(",") if x.strip()]
    for pl in plan(
        Path(args.models_dir) if args.models_dir else None,
        Path(args.data_dir) if args.data_dir else None,
        Path(args.out_dir),
        args.gpus,
        args.attn,
        only,
    ):
        fields = [pl.preset, pl.problem, pl.hub, pl.val_file, *pl.overrides]
        if any(SEP in f or "\n" in f for f in fields):
            raise SmokeError(f"{pl.preset}: a path holds a newline or a \\x1f character")
        print(SEP.join(fields))


def _print_downloads(args: argparse.Namespace) -> None:
    """`downloads`: what the caches lack, or with MODELS_DIR DATA_DIR what fills the two folders."""
    if args.data_dir is None and args.models_dir is not None:
        raise SmokeError("downloads takes both MODELS_DIR and DATA_DIR, or neither (the caches)")
    if args.models_dir is not None and (args.presets or args.smoke):
        raise SmokeError("--presets and --smoke go with the caches, not with MODELS_DIR DATA_DIR")
    if args.models_dir is None:
        only = [x.strip() for x in args.presets.split(",") if x.strip()]
        print("\n".join(cache_downloads(only, args.smoke)))
    else:
        print("\n".join(downloads(Path(args.models_dir).absolute(), Path(args.data_dir).absolute())))


def _record_result(args: argparse.Namespace) -> None:
    """`result`: judge the run, append its Result to --results, print its line."""
    r = judge(
        args.preset,
        Path(args.run_dir),
        args.train_rc,
        args.convert_rc,
        args.eval_rc,
        Path(args.eval_dir) if args.eval_dir else None,
        Path(args.gpu_log) if args.gpu_log else None,
        args.skip,
        gpu_gib=args.gpu_gib,
    )
    with open(args.results, "a") as f:
        f.write(json.dumps(asdict(r)) + "\n")
    print(line(r), flush=True)


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        if args.cmd == "plan":
            _print_plan(args)
        elif args.cmd == "downloads":
            _print_downloads(args)
        elif args.cmd == "questions":
            n = write_questions(Path(args.parquet), Path(args.out), args.n)
            print(f"{n} questions in {args.out}")
        elif args.cmd == "result":
            _record_result(args)
        else:
            results = read_results(Path(args.results))
            print(table(results))
            return 0 if results and all(r.status == "pass" for r in results) else 1
    except SmokeError as exc:
        print(f"gpu_smoke: {exc}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
