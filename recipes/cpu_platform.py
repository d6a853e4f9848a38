"""verl's real trainer on a CPU: the platform module, the rollout server and the shims it needs.

verl 0.9.1 has no CPU device and no CPU rollout backend; with no GPU it assumes CUDA. This module
is everything that gets its V1 PPO trainer (FSDP2 actor, agent loop, reward loop, TransferQueue)
running on a CPU with a small model, without editing verl's files. `platform=cpu`
(configs/platform/cpu.yaml) turns it on; the training entry point sets the environment below.

What it takes, and why (1-8 are the blockers in VERL_NOTES.md, "Running verl's real trainer on
a CPU"; 9-12 were hit after them):

 1. TransferQueue wants ~10 one-CPU Ray actors: config `ray_init.num_cpus=32`, one storage unit.
 2. The resource pool asks Ray for GPUs: config `ray_init.num_gpus=1`, a logical slot.
 3. No CPU platform, so NCCL: `PlatformCPU` in recipes/plugins.py (device "cpu", gloo), chosen by
    `VERL_PLATFORM=cpu`.
 4. Training engines are registered for cuda only: `VERL_ENGINE_DEVICE=cuda
    VERL_ENGINE_VENDOR=nvidia` (verl's FSDP engine itself runs on any torch device).
 5. FlashAttention2 by default: config `attn_implementation=sdpa`.
 6. FSDP1 needs an accelerator: config `strategy=fsdp2`, no torch.compile.
 7. Rollouts only through vLLM/SGLang/TRT-LLM: `HFRolloutServer` below, transformers `generate`
    in a Ray actor, registered as rollout `hf_cpu`.
 8. torch.cuda memory/FLOPs/RNG utilities: `_CPUDeviceModule` (recipes/plugins.py), torch.cpu
    plus no-op memory queries, a device name, and the CPU generator's state for checkpoints.
 9. `current_device()` as an int means an accelerator index to torch: the platform returns
    "cpu", as `torch.cpu.current_device()` does.
10. The forward-only reference model is offloaded with pinned memory: `patch_offload_policy`.
11. The process-group backend "cpu:gloo,<device>:<backend>" becomes "cpu:gloo,cpu:gloo", which
    torch rejects: `patch_process_group`.
12. Dataloader worker processes are killed noisily at exit: config `dataloader_num_workers=0`.

All of this touches verl internals, which is why verl is pinned exactly;
tests/test_cpu_platform.py fails loudly when an upgrade breaks any of it.

The module is imported in every Ray process through our `verl.plugins` entry point
(recipes/plugins.py), before verl resolves its platform. Registering the "cpu" platform changes
nothing on GPU machines: it is only chosen when `VERL_PLATFORM=cpu`.
"""

from __future__ import annotations

import asyncio
import logging
import os
from collections.abc import Generator
from typing import Any

import torch

logger = logging.getLogger(__name__)

ROLLOUT_NAME = "hf_cpu"

# Environment that selects this platform in every process (set by recipes.train for platform=cpu,
# before Ray starts, so Ray's workers inherit it).
CPU_ENV = {
    "VERL_PLATFORM": "cpu",  # blocker 3
    "VERL_ENGINE_DEVICE": "cuda",  # blocker 4: pick the FSDP engine registered for cuda ...
    "VERL_ENGINE_VENDOR": "nvidia",  # ... which runs on any torch device
    "TOKENIZERS_PARALLELISM": "false",
}


# ---------------------------------------------------------------------------------- rollout
def _server_name(replica_rank: int) -> str:
    return f"{ROLLOUT_NAME}_server_{replica_rank}"


class HFRolloutServer:
    """A Ray actor that answers verl's token-in-token-out `generate` with transformers (blocker 7).

    Requests that arrive together (the agent loop sends all of a step's samples at once) are
    batched: one left-padded `model.generate` per group of equal sampling settings. Log-probs are
    those of the sampled tokens under softmax(logits / temperature), as verl's actor computes them.
    Weights arrive from the trainer through `update_weights` after every step.
    """

    def __init__(self, model_path: str, rollout_config: Any, replica_rank: int = 0, max_batch: int = 64):
        from transformers import AutoModelForCausalLM, AutoTokenizer

        torch.manual_seed(int(getattr(rollout_config, "seed", 0) or 0) + replica_rank)
        self.config = rollout_config
        self.tokenizer = AutoTokenizer.from_pretrained(model_path)
        self.model = AutoModelForCausalLM.from_pretrained(
            model_path, dtype=torch.float32, attn_implementation="sdpa"
        ).eval()
        gen = self.model.generation_config
        eos = gen.eos_token_id if gen.eos_token_id is not None else self.tokenizer.eos_token_id
        self.eos_ids = [eos] if isinstance(eos, int) else list(eos or [])
        if self.tokenizer.eos_token_id is not None and self.tokenizer.eos_token_id not in self.eos_ids:
            self.eos_ids.append(self.tokenizer.eos_token_id)
        pad = self.tokenizer.pad_token_id
        self.pad_id = pad if pad is not None else self.eos_ids[0]
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
            raise ValueError("the hf_cpu rollout serves text-only models")
        prompt_ids = [int(t) for t in prompt_ids]
        params = dict(sampling_params)
        max_len = int(self.config.prompt_length) + int(self.config.response_length)
        room = max_len - len(prompt_ids)
        if room < 1:
            raise ValueError(f"prompt of {len(prompt_ids)} tokens leaves no room within {max_len}")
        max_tokens = params.pop("max_tokens", params.pop("max_new_tokens", self.config.response_length))
        max_tokens = max(1, min(int(max_tokens), int(self.config.response_length), room))
        temperature = float(params.get("temperature", 1.0) or 0.0)
        key = (temperature, float(params.get("top_p", 1.0)), int(params.get("top_k", -1) or -1))
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
        await asyncio.sleep(0.02)  # let the rest of a step's requests arrive
        while self._pending:
            key = self._pending[0][0]
            batch = [r for r in self._pending if r[0] == key][: self.max_batch]
            taken = {id(r) for r in batch}
            self._pending = [r for r in self._pending if id(r) not in taken]
            try:
                outs = await asyncio.to_thread(self._generate_batch, key, [(p, m) for _, p, m, _ in batch])
            except Exception as exc:  # report to every waiting request, keep serving
                for *_, fut in batch:
                    if not fut.done():
                        fut.set_exception(exc)
                continue
            for (*_, fut), out in zip(batch, outs, strict=True):
                if not fut.done():
                    fut.set_result(out)

    @torch.no_grad()
    def _generate_batch(
        self, key: tuple[float, float, int], requests: list[tuple[list[int], int]]
    ) -> list[tuple[list[int], list[float]]]:
        temperature, top_p, top_k = key
        width = max(len(p) for p, _ in requests)
        input_ids = torch.full((len(requests), width), self.pad_id, dtype=torch.long)
        attention = torch.zeros_like(input_ids)
        for i, (p, _) in enumerate(requests):  # left padding
            input_ids[i, width - len(p) :] = torch.tensor(p)
            attention[i, width - len(p) :] = 1
        sample = temperature > 0
        out = self.model.generate(
            input_ids=input_ids,
            attention_mask=attention,
            max_new_tokens=max(m for _, m in requests),
            do_sample=sample,
            temperature=temperature if sample else None,
            top_p=top_p if sample and top_p < 1.0 else None,
            top_k=top_k if sample and top_k > 0 else None,
            eos_token_id=self.eos_ids,
            pad_token_id=self.pad_id,
            output_logits=True,
            return_dict_in_generate=True,
        )
        new = out.sequences[:, width:]
        logits = torch.stack(out.logits, dim=1).float()  # raw logits, [batch, steps, vocab]
        logp = torch.log_softmax(logits / (temperature if sample else 1.0), dim=-1)
        token_logp = logp.gather(-1, new[:, : logp.shape[1]].unsqueeze(-1)).squeeze(-1)
        results = []
        for i, (_, max_tokens) in enumerate(requests):
            ids = new[i, :max_tokens].tolist()
            for j, t in enumerate(ids):  # keep the first stop token, drop what follows
                if t in self.eos_ids:
                    ids = ids[: j + 1]
                    break
            results.append((ids, token_logp[i, : len(ids)].tolist()))
        return results

    # -- weights
    def update_weights(self, state_dict: dict[str, torch.Tensor], global_steps: int | None = None) -> None:
        own = self.model.state_dict()
        unknown = sorted(set(state_dict) - set(own))
        if unknown:
            raise KeyError(f"hf_cpu rollout got weights it does not have: {unknown[:5]}")
        tied = {"lm_head.weight"} if getattr(self.model.config, "tie_word_embeddings", False) else set()
        missing = sorted(set(own) - set(state_dict) - tied)
        if missing:
            raise KeyError(f"hf_cpu rollout did not receive weights for: {missing[:5]}")
        with torch.no_grad():
            for name, tensor in state_dict.items():
                own[name].copy_(tensor.to(own[name].dtype))
        self.global_steps = global_steps

    def set_global_steps(self, global_steps: int) -> None:
        self.global_steps = global_steps

    @torch.no_grad()
    def state_checksum(self) -> float:
        """Sum of all weights (tests use it to see that updates arrive)."""
        return float(sum(p.double().sum() for p in self.model.parameters()))

    # -- lifecycle calls verl makes on every rollout server; nothing to free on a CPU
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
    """The RolloutReplica for `rollout.name=hf_cpu`: one HFRolloutServer per replica."""
    import ray
    from verl.utils.fs import copy_to_local
    from verl.workers.rollout.replica import RolloutReplica

    class HFReplica(RolloutReplica):
        async def launch_servers(self) -> None:
            model_path = copy_to_local(self.model_config.path)
            name = _server_name(self.replica_rank)
            server = (
                ray.remote(HFRolloutServer)
                .options(name=name, num_cpus=0, max_concurrency=self.max_concurrency)
                .remote(model_path, self.config, self.replica_rank)
            )
            self.servers = [server]
            self._server_handle = server
            self._server_address = name

    return HFReplica


def _rollout_adapter_class():
    from verl.workers.rollout.base import BaseRollout

    class HFServerAdapter(BaseRollout):
        """Lives in each actor worker; sends the trainer's weights to its replica's server."""

        def __init__(self, config, model_config, device_mesh, replica_rank: int = -1):
            super().__init__(config, model_config, device_mesh)
            world = (
                self.config.tensor_model_parallel_size
                * self.config.data_parallel_size
                * self.config.pipeline_model_parallel_size
            )
            rank = int(os.environ.get("RANK", "0"))
            self.replica_rank = rank // world if replica_rank == -1 else replica_rank
            self._has_server = rank % world == 0
            self._server = None

        async def resume(self, tags: list[str]) -> None: ...
        async def release(self) -> None: ...

        async def update_weights(
            self,
            weights: Generator[tuple[str, torch.Tensor], None, None],
            global_steps: int | None = None,
            wire_format: str = "named_tensors",
            **_kwargs: Any,
        ) -> None:
            import ray

            if wire_format != "named_tensors":
                raise ValueError(f"hf_cpu rollout takes named_tensors weights, not {wire_format!r}")
            state = {}
            for name, tensor in weights:  # every rank iterates: gathering a DTensor is collective
                full = tensor.full_tensor() if hasattr(tensor, "full_tensor") else tensor
                state[name] = full.detach().to("cpu", copy=True)
            if self._has_server:
                if self._server is None:
                    self._server = ray.get_actor(_server_name(self.replica_rank))
                await self._server.update_weights.remote(state, global_steps)

    return HFServerAdapter


def __getattr__(name: str) -> Any:
    """verl imports the rollout adapter by dotted name: build `HFServerAdapter` on first access."""
    if name == "HFServerAdapter":
        cls = _rollout_adapter_class()
        globals()[name] = cls
        return cls
    raise AttributeError(name)


def patch_process_group() -> None:
    """(11) verl builds the backend string "cpu:gloo,<device>:<backend>", which torch rejects
    when the device is the CPU too. Wrap verl's initializer to pass "cpu:gloo" on this platform
    (the engine workers import it by name, so patch both places)."""
    import sys

    import verl.utils.distributed as dist
    from verl.utils.device import get_device_name

    original = getattr(dist.initialize_global_process_group_ray, "__wrapped__", None)
    original = original or dist.initialize_global_process_group_ray

    def initialize_global_process_group_ray(timeout_second=None, backend=None):
        if backend is None and get_device_name() == "cpu":
            backend = "cpu:gloo"
        return original(timeout_second=timeout_second, backend=backend)

    initialize_global_process_group_ray.__wrapped__ = original
    dist.initialize_global_process_group_ray = initialize_global_process_group_ray
    workers = sys.modules.get("verl.workers.engine_workers")
    if workers is not None:
        workers.initialize_global_process_group_ray = initialize_global_process_group_ray


def patch_offload_policy() -> None:
    """(10) verl's FSDP engine offloads a forward-only model (the reference) with
    `CPUOffloadPolicy(pin_memory=True)`; pinning needs an accelerator. Same policy, unpinned."""
    from torch.distributed.fsdp import CPUOffloadPolicy
    from verl.workers.engine.fsdp import transformer_impl

    def unpinned(pin_memory: bool = True, **kwargs: Any) -> CPUOffloadPolicy:
        return CPUOffloadPolicy(pin_memory=False, **kwargs)

    transformer_impl.CPUOffloadPolicy = unpinned


def install() -> None:
    """Apply the patches that only the CPU platform needs (called when VERL_PLATFORM=cpu)."""
    patch_process_group()
    patch_offload_policy()


def register_rollout() -> None:
    """Register `rollout.name=hf_cpu` with verl's two rollout registries."""
    from verl.workers.rollout import base as rollout_base
    from verl.workers.rollout.replica import RolloutReplicaRegistry

    rollout_base._ROLLOUT_REGISTRY[(ROLLOUT_NAME, "async")] = f"{__name__}.HFServerAdapter"
    RolloutReplicaRegistry.register(ROLLOUT_NAME, _load_replica_class)


# Registered on import (recipes/plugins.py imports this module in every verl process).
register_rollout()
if os.environ.get("VERL_PLATFORM") == "cpu":
    install()
