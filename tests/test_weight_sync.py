"""Two runs on one machine get two weight-sync sockets (recipes/weight_sync.py).

verl's real classes at both ends of the sync, under two Ray clusters started one after the other on
this machine, as two `recipes.train` runs start theirs: the trainer's end (`ServerAdapter`), the
vLLM server (`vLLMHttpServer`) and the socket its vLLM workers connect to (verl's own
`_get_zmq_handle`, called with a namespace standing in for the vLLM worker it is a method of)."""

import os
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow  # a fresh interpreter that imports verl and starts Ray twice (~20 s)

TWO_RUNS = """
import os, sys, types
import ray
from verl.workers.config import HFModelConfig, RolloutConfig
from verl.workers.rollout.replica import RolloutMode
from verl.workers.rollout.vllm_rollout.utils import vLLMColocateWorkerExtension
from verl.workers.rollout.vllm_rollout.vllm_async_server import vLLMHttpServer
from verl.workers.rollout.vllm_rollout.vllm_rollout import ServerAdapter

os.environ.update(RANK="0", RAY_LOCAL_WORLD_SIZE="1")
config, model = RolloutConfig(name="vllm"), HFModelConfig(path=sys.argv[1])
for run in range(2):
    ray.init(num_cpus=1, include_dashboard=False, log_to_driver=False)
    sender = ServerAdapter(config, model, None).zmq_handle
    vLLMHttpServer(config, model, RolloutMode.HYBRID, [], 0, 0, 1, 1, "")
    receiver = vLLMColocateWorkerExtension._get_zmq_handle(types.SimpleNamespace(model_runner=None, local_rank=0))
    print("sockets:", sender, receiver, ray.get_runtime_context().get_job_id())
    ray.shutdown()
"""


def test_two_runs_on_one_machine_sync_weights_through_two_sockets(tiny_model: Path):
    out = subprocess.run(
        [sys.executable, "-c", TWO_RUNS, str(tiny_model)],
        env={**os.environ, "VERL_PLATFORM": "cpu"},
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert out.returncode == 0, out.stderr[-3000:]
    lines = [line.split()[1:] for line in out.stdout.splitlines() if line.startswith("sockets: ")]
    (sender_a, receiver_a, job_a), (sender_b, receiver_b, job_b) = lines
    # each run is job 01000000 of its own cluster: the job id alone named both runs' sockets alike
    assert job_a == job_b == "01000000"
    assert sender_a == receiver_a and sender_b == receiver_b  # each run's two ends meet
    assert sender_a != sender_b  # and the runs do not meet each other
    assert sender_a.startswith("ipc:///tmp/rl-colocate-zmq-01000000-")
