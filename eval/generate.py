"""Generating a plan's missing samples (eval/plan.py).

`generate_missing` starts the request's backend (eval/backends.py), generates every missing sample
in chunks, grades each chunk (eval/grading.py: math or letter answers, by the benchmark's kind) and
appends its records to OUT/samples.jsonl as it finishes, so an interruption loses at most one
chunk; the backend is closed on every exit, an error or Ctrl-C included. Returns how many samples
it generated.
"""

from __future__ import annotations

import time

from eval.backends import Backend, make_backend
from eval.grading import grade_responses
from eval.plan import SamplePlan, work_passes
from eval.request import EvalRequest
from eval.results import prompt_sha


def _chunks(items: list, size: int | None):
    size = size or max(1, len(items))
    for i in range(0, len(items), size):
        yield items[i : i + size]


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
