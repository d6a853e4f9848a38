"""Run by tests/test_cpu_platform.py in a fresh interpreter: builds verl's real actor/rollout/ref
worker (one rank, gloo, verl's FSDP2 engines for the actor and the reference, the tiny model)
from the config `python -m recipes.train experiment=demo_cpu ARGS...` composes, runs each
engine's own forward (`infer_batch`, the path of old and reference log-probs, under the
engine's autocast) and one actor update (`train_mini_batch`), and prints one JSON line: per
engine, the dtypes every nn.Linear computed in (its output) and saw as weights (FSDP2 casts
the gathered parameters to mixed_precision.param_dtype), and the engine's autocast dtype.

    python tests/dtype_probe.py CACHE_DIR [OVERRIDE ...]
"""

import json
import os
import sys

from worker_env import single_cpu_rank  # tests/worker_env.py, beside this script

single_cpu_rank(sys.argv[1])  # before anything imports verl

import torch  # noqa: E402
from tensordict import TensorDict  # noqa: E402

from recipes.platforms.cpu import CPU_ENV  # noqa: E402
from recipes.train import compose, prepare  # noqa: E402

assert all(os.environ[k] == v for k, v in CPU_ENV.items()), "CPU_ENV changed: update tests/worker_env.py"
cfg = compose(["experiment=demo_cpu", *sys.argv[2:]])
prepare(cfg)

from verl.utils import tensordict_utils as tu  # noqa: E402
from verl.workers.engine_workers import ActorRolloutRefWorker  # noqa: E402
from verl.workers.utils.padding import left_right_2_no_padding  # noqa: E402

worker = ActorRolloutRefWorker(config=cfg.actor_rollout_ref, role="actor_rollout_ref")
worker.init_model()

seen: dict[str, dict[str, set]] = {}


def watch(name: str, module: torch.nn.Module) -> None:
    record = seen.setdefault(name, {"output": set(), "weight": set()})

    def hook(layer, _inputs, output):
        record["output"].add(str(output.dtype))
        record["weight"].add(str(layer.weight.dtype))

    for layer in module.modules():
        if isinstance(layer, torch.nn.Linear):
            layer.register_forward_hook(hook)


def batch() -> TensorDict:
    """Two prompt+response sequences, left-padded prompts, right-padded responses."""
    torch.manual_seed(0)
    bs, p, r = 2, 6, 5
    prompts = torch.randint(3, 200, (bs, p))
    responses = torch.randint(3, 200, (bs, r))
    attention = torch.ones(bs, p + r, dtype=torch.long)
    attention[1, :2] = 0  # a shorter prompt
    attention[1, -1] = 0  # a shorter response
    response_mask = attention[:, p:].clone()
    position = (attention.cumsum(-1) - 1).clamp(min=0)
    td = TensorDict(
        {
            "prompts": prompts,
            "responses": responses,
            "input_ids": torch.cat([prompts, responses], dim=1),
            "attention_mask": attention,
            "position_ids": position,
            "response_mask": response_mask,
        },
        batch_size=bs,
    )
    td = left_right_2_no_padding(td)
    tu.assign_non_tensor(
        td,
        temperature=1.0,
        calculate_entropy=True,
        compute_loss=False,
        global_token_num=[11, 9],
        micro_batch_size_per_gpu=2,
    )
    return td


out = {}
for role in ("actor", "ref"):
    training = getattr(worker, role)
    watch(role, training.engine.module)
    training.infer_batch(batch())
    out[role] = {
        "output": sorted(seen[role]["output"]),
        "weight": sorted(seen[role]["weight"]),
        "autocast": str(getattr(training.engine, "_autocast_dtype", None)),
    }
print(json.dumps(out), flush=True)
