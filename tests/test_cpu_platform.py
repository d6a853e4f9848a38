"""The CPU shims of recipes/cpu_platform.py against the pinned verl, and the hf_cpu rollout's math.

Part 1 runs in fresh interpreters (the plugin is loaded on `import verl`, and verl resolves its
platform once per process): with VERL_PLATFORM=cpu every shim must be in place and working; without
it the CPU platform must not be auto-selected and no patch applied. A verl upgrade that moves or
renames what we patch fails here, by name, instead of deep inside a training run.

Part 2 drives `HFRolloutServer` directly (no Ray): token ids, lengths, stop tokens, and the key
equation, log-probs == log_softmax(logits / T) of an independent unpadded forward pass, whatever
the left padding of the batch they were generated in.
"""

from __future__ import annotations

import asyncio
import json
import os
import socket
import subprocess
import sys
import types
from pathlib import Path

import pytest
import torch

from recipes.cpu_platform import HFRolloutServer
from recipes.models import build_tiny

REPO = Path(__file__).resolve().parents[1]

# ------------------------------------------------------------------------ part 1: fresh interpreters

# Each check runs on its own; the script prints every result (or the error) as JSON on its last line,
# so one broken shim does not hide the others.
_CHECKS = r"""
import json, os, sys, traceback

results = {}

def check(name, fn):
    try:
        results[name] = fn()
    except BaseException as exc:
        results[name] = "ERROR: " + "".join(traceback.format_exception_only(type(exc), exc)).strip()

import verl
import torch
from verl.plugin.platform import get_platform
from verl.utils import device

check("device_name", device.get_device_name)
check("nccl_backend", device.get_nccl_backend)
check("memory_reserved", lambda: device.get_torch_device().memory_reserved())
check("platform_class", lambda: f"{type(get_platform()).__module__}.{type(get_platform()).__qualname__}")

def cpu_available_unforced():
    from recipes.plugins import PlatformCPU
    from verl.plugin.platform.platform_manager import PlatformRegistry
    assert PlatformRegistry.get("cpu") is PlatformCPU, PlatformRegistry.get("cpu")
    return PlatformCPU().is_platform_available(use_smi_check=True)

check("cpu_platform_available", cpu_available_unforced)

def rollout_class():
    from verl.workers.rollout.base import BaseRollout, get_rollout_class
    cls = get_rollout_class("hf_cpu")
    return [f"{cls.__module__}.{cls.__name__}", issubclass(cls, BaseRollout)]

check("rollout_class", rollout_class)

def replica_class():
    from verl.workers.rollout.replica import RolloutReplica, RolloutReplicaRegistry
    cls = RolloutReplicaRegistry.get("hf_cpu")
    return [cls.__name__, isinstance(cls, type) and issubclass(cls, RolloutReplica)]

check("replica_class", replica_class)

def offload_policy():
    from torch.distributed.fsdp import CPUOffloadPolicy
    from verl.workers.engine.fsdp import transformer_impl
    policy = transformer_impl.CPUOffloadPolicy(pin_memory=True)
    return {
        "is_torch_class": transformer_impl.CPUOffloadPolicy is CPUOffloadPolicy,
        "instance_of_torch_class": isinstance(policy, CPUOffloadPolicy),
        "pin_memory": policy.pin_memory,
        # what the patch is for: verl still builds the reference's policy by this name, pinned
        "verl_calls_it_pinned": "CPUOffloadPolicy(pin_memory=True)" in open(transformer_impl.__file__).read(),
    }

check("offload_policy", offload_policy)

def pg_wrapper():
    import verl.utils.distributed as dist
    import verl.workers.engine_workers as engine_workers
    fn = dist.initialize_global_process_group_ray
    return {
        "module": fn.__module__,
        "wrapped": getattr(getattr(fn, "__wrapped__", None), "__module__", None),
        "engine_workers_same": engine_workers.initialize_global_process_group_ray is fn,
    }

check("pg_wrapper", pg_wrapper)

def pg_init():
    import torch.distributed as td
    import verl.utils.distributed as dist
    dist.initialize_global_process_group_ray()
    try:
        x = torch.ones(3)
        td.all_reduce(x)
        return {"backend": str(td.get_backend()), "world_size": td.get_world_size(), "sum": x.tolist()}
    finally:
        td.destroy_process_group()

if os.environ.get("VERL_PLATFORM") == "cpu":
    check("pg_init", pg_init)

def reward_manager():
    from verl.experimental.reward_loop.reward_manager.registry import REWARD_MANAGER
    return "math_pool" in REWARD_MANAGER

check("reward_manager", reward_manager)

def trainer():
    from verl.trainer.ppo.v1 import PPOTrainer, get_trainer_cls
    cls = get_trainer_cls("recipes_sync")
    return [cls.__name__, issubclass(cls, PPOTrainer)]

check("trainer", trainer)

print("RESULTS=" + json.dumps(results, default=repr))
"""


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _env(cpu: bool) -> dict[str, str]:
    env = dict(os.environ)
    for name in ("VERL_PLATFORM", "VERL_ENGINE_DEVICE", "VERL_ENGINE_VENDOR", "VERL_USE_EXTERNAL_PLUGINS"):
        env.pop(name, None)
    for name in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "MASTER_ADDR", "MASTER_PORT", "DIST_INIT_METHOD"):
        env.pop(name, None)
    if cpu:
        env.update(VERL_PLATFORM="cpu", MASTER_ADDR="127.0.0.1", MASTER_PORT=str(_free_port()))
        env.update(RANK="0", WORLD_SIZE="1", LOCAL_RANK="0")
    return env


@pytest.fixture(scope="module")
def fresh() -> dict[str, dict]:
    """Both interpreters run at once; {"cpu": results with VERL_PLATFORM=cpu, "default": without}."""
    procs = {
        mode: subprocess.Popen(
            [sys.executable, "-c", _CHECKS],
            cwd=REPO,
            env=_env(cpu=mode == "cpu"),
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for mode in ("cpu", "default")
    }
    results = {}
    for mode, proc in procs.items():
        try:
            out, err = proc.communicate(timeout=240)
        except subprocess.TimeoutExpired:
            proc.kill()
            out, err = proc.communicate()
        lines = [line for line in out.splitlines() if line.startswith("RESULTS=")]
        assert proc.returncode == 0 and lines, f"{mode} interpreter failed:\n{out[-2000:]}\n{err[-4000:]}"
        results[mode] = json.loads(lines[-1][len("RESULTS=") :])
    return results


def test_cpu_platform_is_selected_by_env(fresh):
    r = fresh["cpu"]
    assert r["platform_class"] == "recipes.plugins.PlatformCPU"
    assert r["device_name"] == "cpu"
    assert r["nccl_backend"] == "gloo"
    assert r["memory_reserved"] == 0
    assert r["cpu_platform_available"] is False  # chosen by VERL_PLATFORM only, never detected


def test_cpu_patches_are_applied(fresh):
    r = fresh["cpu"]
    assert r["offload_policy"] == {
        "is_torch_class": False,
        "instance_of_torch_class": True,
        "pin_memory": False,
        "verl_calls_it_pinned": True,
    }
    assert r["pg_wrapper"] == {
        "module": "recipes.cpu_platform",
        "wrapped": "verl.utils.distributed",
        "engine_workers_same": True,
    }


def test_cpu_process_group_initializes_over_gloo(fresh):
    r = fresh["cpu"]["pg_init"]
    assert isinstance(r, dict), r
    assert "gloo" in r["backend"] and r["world_size"] == 1 and r["sum"] == [1.0, 1.0, 1.0]


@pytest.mark.parametrize("mode", ["cpu", "default"])
def test_registries(fresh, mode):
    r = fresh[mode]
    assert r["rollout_class"] == ["recipes.cpu_platform.HFServerAdapter", True]
    assert r["replica_class"] == ["HFReplica", True]
    assert r["reward_manager"] is True
    assert r["trainer"] == ["RecipesTrainerSync", True]


def test_without_env_nothing_changes(fresh):
    r = fresh["default"]
    assert r["cpu_platform_available"] is False
    assert r["platform_class"] != "recipes.plugins.PlatformCPU"
    assert r["device_name"] != "cpu"
    assert r["offload_policy"]["is_torch_class"] is True
    assert r["pg_wrapper"]["module"] == "verl.utils.distributed"
    assert r["pg_wrapper"]["wrapped"] is None
    assert "pg_init" not in r


# ------------------------------------------------------------------------ part 2: the rollout server

CONFIG = types.SimpleNamespace(prompt_length=64, response_length=16, seed=0)
QUESTIONS = [
    "What is 2+2?",
    "x",
    "Compute the greatest common divisor of 12 and 18.",
    "A prime number has exactly two positive divisors. Is 91 prime?",
    "Solve $x^2 - 5x + 6 = 0$.",
    "What is 25% of 80?",
]


@pytest.fixture(scope="module")
def tiny(tmp_path_factory) -> Path:
    return build_tiny(tmp_path_factory.mktemp("cpu_platform") / "tiny", seed=0)


@pytest.fixture(scope="module")
def server(tiny) -> HFRolloutServer:
    return HFRolloutServer(str(tiny), CONFIG)


@pytest.fixture(scope="module")
def reference(tiny):
    from transformers import AutoModelForCausalLM

    return AutoModelForCausalLM.from_pretrained(tiny, dtype=torch.float32, attn_implementation="sdpa").eval()


@pytest.fixture(scope="module")
def prompts(server) -> list[list[int]]:
    tok = server.tokenizer
    out = []
    for q in QUESTIONS:
        text = tok.apply_chat_template(
            [{"role": "user", "content": q}], add_generation_prompt=True, tokenize=False
        )
        out.append(tok.encode(text, add_special_tokens=False))
    assert len({len(p) for p in out}) >= 4, [len(p) for p in out]  # real left padding in a batch
    assert max(len(p) for p in out) <= CONFIG.prompt_length
    return out


def _generate(server, requests: list[tuple[list[int], dict]]):
    async def go():
        return await asyncio.gather(
            *(server.generate(p, sp, request_id=f"r{i}") for i, (p, sp) in enumerate(requests))
        )

    return asyncio.run(go())


@torch.no_grad()
def _ref_logprobs(model, prompt: list[int], response: list[int], temperature: float) -> torch.Tensor:
    """log_softmax(logits / T) at the response tokens, from one unpadded forward pass."""
    logits = model(input_ids=torch.tensor([prompt + response])).logits[0].float()
    steps = logits[len(prompt) - 1 : len(prompt) - 1 + len(response)]
    logp = torch.log_softmax(steps / (temperature if temperature > 0 else 1.0), dim=-1)
    return logp.gather(-1, torch.tensor(response)[:, None]).squeeze(-1)


def _check_logprobs(reference, prompt, out, temperature):
    assert out.log_probs is not None and len(out.log_probs) == len(out.token_ids)
    expected = _ref_logprobs(reference, prompt, out.token_ids, temperature)
    torch.testing.assert_close(torch.tensor(out.log_probs), expected, atol=1e-4, rtol=0)


def test_concurrent_generate_shapes(server, prompts):
    vocab = server.model.config.vocab_size
    requests = [
        (p, {"temperature": 1.0, **({"max_tokens": 5} if i % 2 else {})}) for i, p in enumerate(prompts)
    ]
    outs = _generate(server, requests)
    assert len(outs) == len(prompts)
    for (_, params), out in zip(requests, outs, strict=True):
        limit = params.get("max_tokens", CONFIG.response_length)
        assert 1 <= len(out.token_ids) <= limit
        assert all(0 <= t < vocab for t in out.token_ids)
        assert all(t not in server.eos_ids for t in out.token_ids[:-1])  # nothing after the first eos
        if len(out.token_ids) < limit:
            assert out.token_ids[-1] in server.eos_ids  # short only because it stopped
        assert out.log_probs is None
        assert out.stop_reason == "completed"


def test_stops_right_after_eos(tiny, server, prompts):
    """Make a token the greedy outputs really emit a stop token: each output must end at its first."""
    full = _generate(server, [(p, {"temperature": 0, "logprobs": True}) for p in prompts])
    stop = full[0].token_ids[2]
    stopper = HFRolloutServer(str(tiny), CONFIG)
    stopper.eos_ids = [*stopper.eos_ids, stop]
    outs = _generate(stopper, [(p, {"temperature": 0, "logprobs": True}) for p in prompts])
    assert outs[0].token_ids == full[0].token_ids[: full[0].token_ids.index(stop) + 1]
    for ref, out in zip(full, outs, strict=True):
        ids = ref.token_ids
        cut = next((j + 1 for j, t in enumerate(ids) if t in stopper.eos_ids), len(ids))
        assert out.token_ids == ids[:cut]
        torch.testing.assert_close(
            torch.tensor(out.log_probs), torch.tensor(ref.log_probs[:cut]), atol=1e-5, rtol=0
        )


def test_logprobs_single_prompt(server, reference, prompts):
    (out,) = _generate(server, [(prompts[2], {"temperature": 0.7, "logprobs": True})])
    assert len(out.token_ids) >= 2
    _check_logprobs(reference, prompts[2], out, 0.7)


def test_logprobs_left_padded_batch(server, reference, prompts):
    """The key equation: left padding inside the batch must not change any sequence's log-probs."""
    requests = [
        (p, {"temperature": 0.7, "logprobs": True, "max_tokens": 16 - i}) for i, p in enumerate(prompts)
    ]
    outs = _generate(server, requests)
    for (p, _), out in zip(requests, outs, strict=True):
        _check_logprobs(reference, p, out, 0.7)


def test_greedy_matches_hf_generate(server, reference, prompts):
    eos = server.eos_ids
    outs = _generate(server, [(p, {"temperature": 0, "logprobs": True}) for p in prompts])
    for p, out in zip(prompts, outs, strict=True):
        ids = torch.tensor([p])
        expected = reference.generate(
            input_ids=ids,
            attention_mask=torch.ones_like(ids),
            do_sample=False,
            max_new_tokens=CONFIG.response_length,
            eos_token_id=eos,
            pad_token_id=server.pad_id,
        )[0, len(p) :].tolist()
        assert out.token_ids == expected
        _check_logprobs(reference, p, out, 0.0)  # temperature 0: plain log_softmax(logits)


def test_logprobs_only_when_asked(server, prompts):
    absent, false, true = _generate(
        server,
        [
            (prompts[0], {"temperature": 0}),
            (prompts[1], {"temperature": 0, "logprobs": False}),
            (prompts[2], {"temperature": 0, "logprobs": True}),
        ],
    )
    assert absent.log_probs is None and false.log_probs is None
    assert true.log_probs is not None and len(true.log_probs) == len(true.token_ids)


def test_update_weights(tiny, reference, prompts):
    srv = HFRolloutServer(str(tiny), CONFIG)
    request = [(prompts[3], {"temperature": 0, "logprobs": True})]
    (before,) = _generate(srv, request)
    checksum = srv.state_checksum()
    numel = sum(p.numel() for p in srv.model.parameters())  # tied embedding counted once

    shifted = {k: v + 0.01 for k, v in srv.model.state_dict().items()}
    srv.update_weights(shifted, global_steps=7)
    assert srv.state_checksum() - checksum == pytest.approx(0.01 * numel, rel=1e-6)

    (after,) = _generate(srv, request)
    assert after.extra_fields["global_steps"] == 7
    n = min(len(before.log_probs), len(after.log_probs))
    assert not torch.allclose(
        torch.tensor(before.log_probs[:n]), torch.tensor(after.log_probs[:n]), atol=1e-4
    )
    moved = type(reference)(reference.config).eval()
    moved.load_state_dict(shifted)
    _check_logprobs(moved, prompts[3], after, 0.0)  # the new weights, and only them, are in use

    # the tied lm_head may be left out; nothing else may
    srv.update_weights({k: v for k, v in shifted.items() if k != "lm_head.weight"})
    checksum = srv.state_checksum()
    with pytest.raises(KeyError, match="bogus.weight"):
        srv.update_weights({**shifted, "bogus.weight": torch.zeros(2)})
    with pytest.raises(KeyError, match="model.norm.weight"):
        srv.update_weights({k: v for k, v in shifted.items() if k != "model.norm.weight"})
    assert srv.state_checksum() == checksum  # a rejected update changes nothing


def test_prompt_length_limits(server):
    max_len = CONFIG.prompt_length + CONFIG.response_length
    with pytest.raises(ValueError):
        _generate(server, [([5] * (max_len + 1), {"temperature": 0})])
    with pytest.raises(ValueError):
        _generate(server, [([5] * max_len, {"temperature": 0})])  # no room for a single token
    (out,) = _generate(server, [([5] * (max_len - 1), {"temperature": 0})])
    assert len(out.token_ids) == 1


@pytest.mark.parametrize(
    "first_import",
    [
        "import recipes.cpu_platform",
        "import recipes.trainer",
        "import rewards.verl_manager",
        "import recipes.plugins",
    ],
)
def test_every_name_is_registered_whichever_module_a_process_imports_first(first_import):
    """Ray workers unpickle our classes, so a worker may import one of our modules before verl;
    verl then loads the plugin while that module is half-imported (a bug found this way)."""
    code = (
        f"{first_import}\n"
        "from verl.experimental.reward_loop.reward_manager.registry import REWARD_MANAGER\n"
        "from verl.workers.rollout.replica import RolloutReplicaRegistry\n"
        "from verl.trainer.ppo.v1 import get_trainer_cls\n"
        "from verl.utils.device import get_device_name\n"
        "assert 'math_pool' in REWARD_MANAGER\n"
        "RolloutReplicaRegistry.get('hf_cpu'); get_trainer_cls('recipes_sync')\n"
        "print(get_device_name())\n"
    )
    env = {**os.environ, "VERL_PLATFORM": "cpu"}
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=300, env=env, cwd=REPO
    )
    assert out.returncode == 0, out.stderr[-3000:]
    assert out.stdout.strip().splitlines()[-1] == "cpu"
