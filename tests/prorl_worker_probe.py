"""Run by tests/test_prorl.py in a fresh interpreter: builds our real `ProRLWorker` in this process
(one rank, gloo, verl's FSDP2 engines for the actor and the CPU-offloaded reference, the tiny
model), trains the actor with its own engine and optimizer, calls the worker's reset / save / load
methods directly (what a Ray worker group's ONE_TO_ALL call runs on each rank) and prints one
JSON line of measurements for the test to check.

    python tests/prorl_worker_probe.py CACHE_DIR SNAPSHOT_DIR
"""

import json
import os
import sys

from worker_env import single_cpu_rank  # tests/worker_env.py, beside this script

single_cpu_rank(sys.argv[1])  # before anything imports verl

import torch  # noqa: E402

from recipes.methods.prorl import ProRLError, ProRLWorker, sharded_params  # noqa: E402
from recipes.platforms.cpu import CPU_ENV  # noqa: E402
from recipes.train import compose, prepare  # noqa: E402

assert all(os.environ[k] == v for k, v in CPU_ENV.items()), "CPU_ENV changed: update tests/worker_env.py"
cfg = compose(["experiment=demo_cpu_prorl", "actor_rollout_ref.actor.optim.lr=0.01"])
prepare(cfg)
worker = ProRLWorker(config=cfg.actor_rollout_ref, role="actor_rollout_ref")
worker.init_model()
actor, ref = worker.actor.engine, worker.ref.engine
opt = actor.optimizer
beta1, beta2 = opt.param_groups[0]["betas"]
torch.manual_seed(0)
ids = torch.randint(3, 200, (4, 24))


def local(t):
    return t.to_local() if hasattr(t, "to_local") else t


def train_step() -> dict:
    """One real optimizer step of the actor (next-token loss); returns the clipped grads Adam used."""
    with actor.train_mode(zero_grad_on_exit=False):
        logits = actor.module(input_ids=ids).logits.float()
        loss = torch.nn.functional.cross_entropy(logits[:, :-1].flatten(0, 1), ids[:, 1:].flatten())
        loss.backward()
        actor.optimizer_step()
        grads = {
            p: local(p.grad).clone() for g in opt.param_groups for p in g["params"] if p.grad is not None
        }
        actor.optimizer_zero_grad()
    actor.lr_scheduler_step()
    return grads


def max_param_diff() -> float:
    a, r = sharded_params(actor.module), sharded_params(ref.module)
    return max((a[k].float() - r[k].float()).abs().max().item() for k in a)


@torch.no_grad()
def logits_diff() -> float:
    with actor.eval_mode():
        la = actor.module(input_ids=ids).logits.float()
    with ref.eval_mode():
        lr_ = ref.module(input_ids=ids).logits.float()
    return (la - lr_).abs().max().item()


def moments() -> dict:
    return {
        p: {k: local(v).clone() for k, v in st.items() if torch.is_tensor(v)} for p, st in opt.state.items()
    }


def schedule() -> dict:
    return {
        "lr": [g["lr"] for g in opt.param_groups],
        "last_lr": actor.lr_scheduler.get_last_lr(),
        "last_epoch": actor.lr_scheduler.last_epoch,
    }


def first_step_mismatch(grads: dict) -> dict:
    """Largest relative gap between Adam's state and a fresh optimizer's first step on `grads`:
    exp_avg = (1 - beta1) g, exp_avg_sq = (1 - beta2) g^2, step = 1."""
    gap_m = gap_v = 0.0
    steps = set()
    for p, g in grads.items():
        st = opt.state[p]
        m, v = local(st["exp_avg"]), local(st["exp_avg_sq"])
        scale = g.abs().max().item() + 1e-30
        gap_m = max(gap_m, (m - (1 - beta1) * g).abs().max().item() / ((1 - beta1) * scale))
        gap_v = max(gap_v, (v - (1 - beta2) * g * g).abs().max().item() / ((1 - beta2) * scale * scale))
        steps.add(float(st["step"]))
    return {"exp_avg": gap_m, "exp_avg_sq": gap_v, "steps": sorted(steps)}


out = {"initial_param_diff": max_param_diff()}
train_step()
train_step()
out["trained_param_diff"] = max_param_diff()
out["trained_logits_diff"] = logits_diff()

# reset without the optimizer: the reference follows, the optimizer state is untouched
before, sched = moments(), schedule()
out["keep_optimizer"] = worker.prorl_reset_reference(reset_optimizer=False)
after = moments()
out["keep"] = {
    "param_diff": max_param_diff(),
    "logits_diff": logits_diff(),
    "schedule_same": schedule() == sched,
    "moments_same": before.keys() == after.keys()
    and all(torch.equal(before[p][k], after[p][k]) for p in before for k in before[p]),
    "n_states": len(after),
}
out["keep"]["next_step"] = first_step_mismatch(train_step())

# reset with the optimizer: state cleared, schedule kept, next step is a fresh optimizer's first
out["pre_reset_param_diff"] = max_param_diff()
sched = schedule()
out["reset_optimizer"] = worker.prorl_reset_reference(reset_optimizer=True)
out["reset"] = {
    "param_diff": max_param_diff(),
    "logits_diff": logits_diff(),
    "schedule_same": schedule() == sched,
    "n_states": len(opt.state),
    "lr": sched["lr"],
}
out["reset"]["next_step"] = first_step_mismatch(train_step())

# snapshot: save the reference, move it (another reset), load: back to the saved shards
folder = sys.argv[2]
worker.prorl_save_reference(folder=folder)
saved = {k: v.clone() for k, v in sharded_params(ref.module).items()}
train_step()
worker.prorl_reset_reference(reset_optimizer=True)
moved = max((sharded_params(ref.module)[k] - saved[k]).abs().max().item() for k in saved)
worker.prorl_load_reference(folder=folder)
restored = max((sharded_params(ref.module)[k] - saved[k]).abs().max().item() for k in saved)
out["snapshot"] = {"moved": moved, "restored": restored, "files": sorted(os.listdir(folder))}
blob = torch.load(os.path.join(folder, "rank_0.pt"), weights_only=True)
blob["world_size"] = 2
torch.save(blob, os.path.join(folder, "rank_0.pt"))
try:
    worker.prorl_load_reference(folder=folder)
    out["snapshot"]["wrong_world_error"] = None
except ProRLError as e:
    out["snapshot"]["wrong_world_error"] = str(e)
print("PROBE " + json.dumps(out), flush=True)
