"""Each run's weight-sync sockets are its own, in its Ray session folder (recipes/platforms/weight_sync.py).

verl's real classes at both ends of the sync, under two Ray clusters started one after the other on
this machine, as two `recipes.train` runs start theirs: the trainer's end (`ServerAdapter`), the
vLLM server (`vLLMHttpServer`) and the socket its vLLM workers connect to (verl's own
`_get_zmq_handle`, called with a namespace standing in for the vLLM worker it is a method of)."""

import os
import subprocess
import sys
from pathlib import Path

import pytest

from recipes.platforms.weight_sync import rename

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
    context, node = ray.get_runtime_context(), ray._private.worker.global_worker.node
    print("sockets:", sender, receiver, context.get_job_id(), context.get_node_id(), node.get_sockets_dir_path())
    ray.shutdown()
"""


@pytest.mark.slow  # a fresh interpreter that imports verl and starts Ray twice (~20 s)
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
    (sender_a, receiver_a, job_a, node_a, dir_a), (sender_b, receiver_b, job_b, node_b, dir_b) = lines
    # each run is job 01000000 of its own cluster: the job id alone named both runs' sockets alike
    assert job_a == job_b == "01000000"
    assert sender_a == receiver_a and sender_b == receiver_b  # each run's two ends meet
    assert sender_a != sender_b  # and the runs do not meet each other
    # each in its own Ray session's sockets folder, not in /tmp where a killed run would leave it
    assert dir_a != dir_b
    assert sender_a == f"ipc://{dir_a}/wsync-{node_a[:8]}-0-0.sock"
    assert sender_b == f"ipc://{dir_b}/wsync-{node_b[:8]}-0-0.sock"


def test_the_socket_keeps_verls_replica_and_rank():
    verl = "ipc:///tmp/rl-colocate-zmq-01000000-ab12-replica-3-rank-7.sock"
    assert rename(verl, "/tmp/ray/session_x/sockets/wsync-ab12cd34") == (
        "ipc:///tmp/ray/session_x/sockets/wsync-ab12cd34-3-7.sock"
    )


def test_a_name_verl_no_longer_uses_or_a_path_too_long_for_a_socket_fails_in_one_sentence():
    with pytest.raises(RuntimeError, match="not named as verl 0.9.1 names it"):
        rename("ipc:///tmp/rl-colocate-zmq-01000000-rank-0.sock", "/tmp/x")
    verl = "ipc:///tmp/rl-colocate-zmq-01000000-replica-0-rank-0.sock"
    assert rename(verl, "/" + "d" * 97) == "ipc:///" + "d" * 97 + "-0-0.sock"  # a path of 107 bytes
    with pytest.raises(RuntimeError, match="start Ray with a shorter --temp-dir"):
        rename(verl, "/" + "d" * 98)  # 108
