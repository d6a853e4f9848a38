"""summary.json and the files written beside it when an evaluation ends.

`summary_settings` is what a summary records as its settings (eval.iterate compares them to skip a
step already evaluated); `summarize` computes per-benchmark numbers from a sample store (only for a
benchmark whose samples are all there; the averages only when every benchmark is complete);
`write_summary` writes OUT/summary.json and OUT/table.md (with the protocol's own metric when there
is one), appends one line to OUT/runs.jsonl and prints the table unless the request is quiet.
"""

from __future__ import annotations

import json
import os
import sys
import time
from collections.abc import Sequence
from pathlib import Path

from eval import metrics
from eval.backends import Decoding
from eval.plan import SamplePlan, sample_settings
from eval.request import EvalRequest
from eval.results import RUNS, SUMMARY, TABLE, SampleStore, atomic_write_json, atomic_write_text, format_table
from recipes import protocols


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
