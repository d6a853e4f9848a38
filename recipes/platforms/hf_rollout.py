"""A rollout without vLLM: transformers decoding in a Ray actor (`actor_rollout_ref.rollout.name=hf`).

For one job only: training on a GPU machine where vLLM cannot be installed (the bare-GPU check,
scripts/gpu_bundle/bare_check.py, docs/gpu.md). The GPU presets keep verl's vLLM server; this
rollout is slower (no paged KV cache, no continuous batching, no CUDA graphs) and is refused
together with `recipes.deterministic` (it takes no per-request seed).

verl 0.9.1 reaches a rollout through two registries, and this module fills both under `hf`:
  RolloutReplicaRegistry  `HFReplica`: per replica, one `HFRolloutServer` Ray actor on the node and
                          device of the replica's first trainer worker (as verl places vLLM's server)
  _ROLLOUT_REGISTRY       `HFServerAdapter`, in each trainer worker: hands the trainer's weights
                          to its replica's server after every update

The server answers verl's token-in-token-out `generate` as vLLM's does: the agent loop (every
method's prompt hooks included) sends each rollout's prompt ids and sampling parameters, and gets
the response ids and, when asked, each sampled token's log-prob under softmax(logits / temperature),
the distribution verl's actor scores (top-k and top-p only restrict which token is drawn).
Requests that arrive together are decoded together: one left-padded batch per group of equal
sampling settings, with a KV cache, stopping a row at its first stop token or its token limit.
The logits of one position are kept at a time, so memory is the weights, the KV cache and one
vocabulary-wide row per sequence (transformers' `generate` keeps every step's logits to return
log-probs: 119 GB for 48 responses of 4,096 tokens over a 151,936-token vocabulary).

recipes/extensions/plugins.py registers both names in every verl process.
"""

from __future__ import annotations

import asyncio
import os
from collections.abc import Generator
from typing import TYPE_CHECKING, Any

from recipes.platforms import memory_probe

if TYPE_CHECKING:
    import torch

NAME = "hf"  # torch is imported where it is used: recipes/checks.py reads NAME before anything heavy


def _server_name(replica_rank: int) -> str:
    return f"{NAME}_rollout_server_{replica_rank}"


def _dtype(name: str | None) -> torch.dtype:
    """The rollout config's dtype name ('bfloat16', 'bf16', 'float32', ...) as a torch dtype."""
    import torch

    aliases = {
        "bf16": "bfloat16",
        "fp16": "float16",
        "half": "float16",
        "fp32": "float32",
        "float": "float32",
    }
    name = aliases.get(str(name or "bfloat16"), str(name or "bfloat16"))
    dtype = getattr(torch, name, None)
    if not isinstance(dtype, torch.dtype):
        raise ValueError(f"rollout dtype {name!r} is not a torch dtype")
    return dtype


def restrict(logits: torch.Tensor, top_k: int, top_p: float) -> torch.Tensor:
    """`logits` [batch, vocab] with the tokens outside top-k and outside the top-p nucleus set to
    -inf (the most likely token always stays), as vLLM's sampler restricts them."""
    import torch

    if top_k > 0 and top_k < logits.shape[-1]:
        kth = torch.topk(logits, top_k, dim=-1).values[:, -1:]
        logits = logits.masked_fill(logits < kth, float("-inf"))
    if 0.0 < top_p < 1.0:
        ordered, order = torch.sort(logits, dim=-1, descending=True)
        probs = torch.softmax(ordered, dim=-1)
        before = torch.cumsum(probs, dim=-1) - probs  # mass of the tokens ranked above each one
        drop = before > top_p
        drop[:, 0] = False
        logits = logits.masked_fill(torch.zeros_like(drop).scatter(-1, order, drop), float("-inf"))
    return logits


def decode(
    model,
    prompts: list[list[int]],
    max_tokens: list[int],
    *,
    temperature: float,
    top_p: float,
    top_k: int,
    stop_ids: list[int],
    pad_id: int,
    generator: torch.Generator | None = None,
) -> list[tuple[list[int], list[float]]]:
    """Sample a response for each prompt: (token ids, their log-probs under softmax(logits / T),
    or under softmax(logits) when greedy). A row ends after its first stop token or its own token
    limit; nothing after either is returned."""
    import torch
    from transformers import DynamicCache

    device = next(model.parameters()).device
    rows, width = len(prompts), max(len(p) for p in prompts)
    ids = torch.full((rows, width), pad_id, dtype=torch.long)
    mask = torch.zeros((rows, width), dtype=torch.long)
    for i, p in enumerate(prompts):  # left padding: every row's next token is at the same column
        ids[i, width - len(p) :] = torch.tensor(p, dtype=torch.long)
        mask[i, width - len(p) :] = 1
    ids, mask = ids.to(device), mask.to(device)
    positions = (mask.cumsum(-1) - 1).clamp(min=0)
    limits = torch.tensor(max_tokens, device=device)
    stops = torch.tensor(stop_ids, device=device)
    with torch.no_grad():  # decoding only: nothing to backpropagate
        cache = DynamicCache()
        out = model(
            input_ids=ids,
            attention_mask=mask,
            position_ids=positions,
            past_key_values=cache,
            logits_to_keep=1,
        )
        sampled, logps = [], []
        done = torch.zeros(rows, dtype=torch.bool, device=device)
        for step in range(max(max_tokens)):
            logits = out.logits[:, -1, :].float()
            if temperature > 0:
                logp = torch.log_softmax(logits / temperature, dim=-1)
                probs = torch.softmax(restrict(logp, top_k, top_p), dim=-1)
                token = torch.multinomial(probs, 1, generator=generator).squeeze(-1)
            else:
                logp = torch.log_softmax(logits, dim=-1)
                token = logits.argmax(dim=-1)
            token = torch.where(done, torch.full_like(token, pad_id), token)
            sampled.append(token)
            logps.append(logp.gather(-1, token.unsqueeze(-1)).squeeze(-1))
            done |= torch.isin(token, stops) | (step + 1 >= limits)
            if bool(done.all()):
                break
            mask = torch.cat([mask, torch.ones((rows, 1), dtype=mask.dtype, device=device)], dim=-1)
            positions = positions[:, -1:] + 1
            out = model(
                input_ids=token.unsqueeze(-1),
                attention_mask=mask,
                position_ids=positions,
                past_key_values=cache,
            )
    tokens = torch.stack(sampled, dim=1).tolist()
    values = torch.stack(logps, dim=1).tolist()
    stop = set(stop_ids)
    results = []
    for i, limit in enumerate(max_tokens):
        row = tokens[i][:limit]
        end = next((j + 1 for j, t in enumerate(row) if t in stop), len(row))
        results.append((row[:end], values[i][:end]))
    return results


class HFRolloutServer:
    """A Ray actor answering verl's `generate` with `decode`, on the GPU it was placed on (the CPU
    where there is none). Weights arrive from the trainer through `update_weights`."""

    def __init__(self, model_path: str, rollout_config: Any, replica_rank: int = 0, max_batch: int = 256):
        import torch
        from transformers import AutoModelForCausalLM, AutoTokenizer

        self.device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
        self.config = rollout_config
        self.generator = torch.Generator(device=self.device)
        self.generator.manual_seed(int(getattr(rollout_config, "seed", 0) or 0) + replica_rank)
        tokenizer = AutoTokenizer.from_pretrained(model_path)
        self.model = AutoModelForCausalLM.from_pretrained(
            model_path, dtype=_dtype(getattr(rollout_config, "dtype", None)), attn_implementation="sdpa"
        ).to(self.device)
        self.model.eval()
        gen = self.model.generation_config
        eos = gen.eos_token_id if gen.eos_token_id is not None else tokenizer.eos_token_id
        self.stop_ids = [eos] if isinstance(eos, int) else list(eos or [])
        if tokenizer.eos_token_id is not None and tokenizer.eos_token_id not in self.stop_ids:
            self.stop_ids.append(tokenizer.eos_token_id)
        pad = tokenizer.pad_token_id
        self.pad_id = pad if pad is not None else self.stop_ids[0]
        self.max_batch = max_batch
        self.global_steps: int | None = None
        self._pending: list[tuple[tuple, list[int], int, asyncio.Future]] = []
        self._draining: asyncio.Task | None = None

    # -- generation
    async def generate(
        self,
        prompt_ids: list[int],
        sampling_params: dict[str, Any],
        request_id: str,
        image_data: Any = None,
        video_data: Any = None,
        **_kwargs: Any,
    ):
        from verl.workers.rollout.replica import TokenOutput

        if image_data is not None or video_data is not None:
            raise ValueError("the hf rollout serves text-only models")
        prompt_ids = [int(t) for t in prompt_ids]
        params = dict(sampling_params)
        if params.get("seed") is not None:
            raise ValueError("the hf rollout takes no per-request seed (recipes.deterministic must be false)")
        limit = int(self.config.prompt_length) + int(self.config.response_length)
        room = limit - len(prompt_ids)
        if room < 1:
            raise ValueError(f"a prompt of {len(prompt_ids)} tokens leaves no room within {limit}")
        max_tokens = params.get("max_tokens", params.get("max_new_tokens")) or self.config.response_length
        max_tokens = max(1, min(int(max_tokens), int(self.config.response_length), room))
        key = (
            float(params.get("temperature", 1.0) or 0.0),
            float(params.get("top_p", 1.0) or 1.0),
            int(params.get("top_k", -1) or -1),
        )
        fut = asyncio.get_running_loop().create_future()
        self._pending.append((key, prompt_ids, max_tokens, fut))
        if self._draining is None or self._draining.done():
            self._draining = asyncio.create_task(self._drain())
        token_ids, log_probs = await fut
        return TokenOutput(
            token_ids=token_ids,
            log_probs=log_probs if params.get("logprobs") else None,
            stop_reason="completed",
            extra_fields={"global_steps": self.global_steps},
        )

    async def _drain(self) -> None:
        await asyncio.sleep(0.05)  # let the rest of a step's requests arrive
        while self._pending:
            key = self._pending[0][0]
            batch = [r for r in self._pending if r[0] == key][: self.max_batch]
            taken = {id(r) for r in batch}
            self._pending = [r for r in self._pending if id(r) not in taken]
            try:
                outs = await asyncio.to_thread(self._decode, key, [(p, m) for _, p, m, _ in batch])
            except Exception as exc:  # noqa: BLE001 - reported to every waiting request; keep serving
                for *_, fut in batch:
                    if not fut.done():
                        fut.set_exception(exc)
                continue
            for (*_, fut), out in zip(batch, outs, strict=True):
                if not fut.done():
                    fut.set_result(out)

    def _decode(self, key: tuple[float, float, int], requests: list[tuple[list[int], int]]):
        import torch

        temperature, top_p, top_k = key
        call = memory_probe.measured(decode, "generation") if memory_probe.enabled() else decode
        out = call(
            self.model,
            [p for p, _ in requests],
            [m for _, m in requests],
            temperature=temperature,
            top_p=top_p,
            top_k=top_k,
            stop_ids=self.stop_ids,
            pad_id=self.pad_id,
            generator=self.generator,
        )
        if self.device.type == "cuda":
            torch.cuda.empty_cache()  # the KV cache goes back before the trainer's phases
        return out

    # -- weights
    def update_weights(self, state_dict: dict[str, torch.Tensor], global_steps: int | None = None) -> None:
        import torch

        own = self.model.state_dict()
        unknown = sorted(set(state_dict) - set(own))
        if unknown:
            raise KeyError(f"the hf rollout got weights its model does not have: {unknown[:5]}")
        tied = {"lm_head.weight"} if getattr(self.model.config, "tie_word_embeddings", False) else set()
        missing = sorted(set(own) - set(state_dict) - tied)
        if missing:
            raise KeyError(f"the hf rollout did not receive weights for: {missing[:5]}")
        with torch.no_grad():
            for name, tensor in state_dict.items():
                own[name].copy_(tensor.to(device=own[name].device, dtype=own[name].dtype))
        self.global_steps = global_steps

    def set_global_steps(self, global_steps: int) -> None:
        self.global_steps = global_steps

    def state_checksum(self) -> float:
        """Sum of all weights in float64 (tests use it to see that an update arrived)."""
        return float(sum(p.detach().double().sum() for p in self.model.parameters()))

    # -- what verl calls on every rollout server; the weights stay, the KV cache is per batch
    async def wake_up(self, tags: list[str] | None = None) -> None: ...
    async def sleep(self) -> None: ...
    async def clear_kv_cache(self) -> None: ...
    async def release_kv_cache(self) -> None: ...
    async def resume_kv_cache(self) -> None: ...
    async def resume_generation(self) -> None: ...
    async def start_profile(self, **_kwargs: Any) -> None: ...
    async def stop_profile(self) -> None: ...
    async def wait_for_requests_to_drain(self) -> None: ...

    async def abort_all_requests(self, reject_request: bool = False) -> dict[str, Any]:
        return {"aborted_count": 0, "request_ids": []}


def _load_replica_class():
    """The RolloutReplica for `rollout.name=hf`: one HFRolloutServer per replica, placed on the
    node and device of the replica's first trainer worker."""
    import ray
    from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy
    from verl.utils.device import get_resource_name
    from verl.utils.fs import copy_to_local
    from verl.workers.rollout.replica import RolloutReplica

    class HFReplica(RolloutReplica):
        async def launch_servers(self) -> None:
            if not self.workers:
                raise RuntimeError("the hf rollout runs beside the trainer (hybrid mode) only")
            node, device = await self.workers[0].__ray_call__.remote(
                lambda _self: (
                    ray.get_runtime_context().get_node_id(),
                    ray.get_runtime_context().get_accelerator_ids()[get_resource_name()][0],
                )
            )
            env = {"CUDA_VISIBLE_DEVICES": str(device), "RAY_EXPERIMENTAL_NOSET_CUDA_VISIBLE_DEVICES": "1"}
            name = _server_name(self.replica_rank)
            server = (
                ray.remote(HFRolloutServer)
                .options(
                    name=name,
                    num_cpus=0,
                    max_concurrency=self.max_concurrency,
                    scheduling_strategy=NodeAffinitySchedulingStrategy(node_id=node, soft=False),
                    runtime_env={"env_vars": env},
                )
                .remote(copy_to_local(self.model_config.path), self.config, self.replica_rank)
            )
            self.servers = [server]
            self._server_handle = server
            self._server_address = name

    return HFReplica


def _adapter_class():
    from verl.workers.rollout.base import BaseRollout

    class HFServerAdapter(BaseRollout):
        """In each trainer worker: gathers the updated weights (every rank takes part: gathering a
        sharded tensor is collective) and sends them from the replica's first rank to its server."""

        def __init__(self, config, model_config, device_mesh, replica_rank: int = -1):
            super().__init__(config, model_config, device_mesh)
            world = (
                self.config.tensor_model_parallel_size
                * self.config.data_parallel_size
                * self.config.pipeline_model_parallel_size
            )
            rank = int(os.environ.get("RANK", "0"))
            self.replica_rank = rank // world if replica_rank == -1 else replica_rank
            self._sends = rank % world == 0
            self._server = None
            self.dtype = _dtype(self.config.dtype)

        async def resume(self, tags: list[str]) -> None: ...
        async def release(self) -> None: ...

        async def update_weights(
            self,
            weights: Generator[tuple[str, torch.Tensor], None, None],
            wire_format: str = "named_tensors",
            global_steps: int | None = None,
            **_kwargs: Any,
        ) -> None:
            import ray

            if wire_format != "named_tensors":
                raise ValueError(f"the hf rollout takes named_tensors weights, not {wire_format!r}")
            state = {}
            for name, tensor in weights:
                full = tensor.full_tensor() if hasattr(tensor, "full_tensor") else tensor
                if self._sends:
                    state[name] = full.detach().to("cpu", dtype=self.dtype, copy=True)
            if self._sends:
                if self._server is None:
                    self._server = ray.get_actor(_server_name(self.replica_rank))
                await self._server.update_weights.remote(state, global_steps)

    return HFServerAdapter


def __getattr__(name: str) -> Any:
    """verl imports the adapter by dotted name: build `HFServerAdapter` on first access."""
    if name == "HFServerAdapter":
        cls = _adapter_class()
        globals()[name] = cls
        return cls
    raise AttributeError(name)


def register_replica() -> None:
    """`rollout.name=hf` in verl's replica registry (once verl.workers.rollout.replica is imported)."""
    from verl.workers.rollout.replica import RolloutReplicaRegistry

    RolloutReplicaRegistry.register(NAME, _load_replica_class)


def register_adapter() -> None:
    """`rollout.name=hf` in verl's adapter registry (once verl.workers.rollout.base is imported)."""
    from verl.workers.rollout import base

    base._ROLLOUT_REGISTRY[(NAME, "async")] = f"{__name__}.HFServerAdapter"


# verl's module -> the registration to make once a process has imported it (recipes/extensions/plugins.py)
PATCHES = {
    "verl.workers.rollout.replica": register_replica,
    "verl.workers.rollout.base": register_adapter,
}
