"""What a resolved request (eval/request.py) still has to generate.

`plan_samples` loads the benchmarks and tokenizes every prompt before any model (a prompt too long
for --max-model-len is an EvalError naming the question), checks that OUT is new, empty or
eval.run's, creates it if missing, opens its sample store (whose settings, `sample_settings`, must
match OUT/config.json and whose prompts must match) and returns a `SamplePlan` of the samples still
missing. `work_passes` orders those into generate calls. No sample is written here.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from eval import benchmarks as bm
from eval.backends import Decoding
from eval.prompts import prompt_token_ids
from eval.request import EvalError, EvalRequest
from eval.results import (
    ResultsError,
    SampleStore,
    check_config,
    check_results_folder,
    ensure_writable,
    prompt_sha,
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
