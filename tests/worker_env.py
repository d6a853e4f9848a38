"""The environment of one verl worker rank on the CPU platform, for the probe scripts that build
verl's real workers in their own process (tests/prorl_worker_probe.py, tests/dtype_probe.py).
Imported by those scripts before anything imports verl."""

import os
import socket


def single_cpu_rank(cache: str) -> None:
    """Rank 0 of 1 over gloo on a free port, the CPU platform of recipes/platforms/cpu.py
    (CPU_ENV; each probe asserts it still matches) and RECIPES_CACHE=cache."""
    os.environ.update(
        VERL_PLATFORM="cpu",
        VERL_ENGINE_DEVICE="cuda",
        VERL_ENGINE_VENDOR="nvidia",
        TOKENIZERS_PARALLELISM="false",
    )
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    os.environ.update(
        RANK="0", WORLD_SIZE="1", LOCAL_RANK="0", MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port)
    )
    os.environ["RAY_LOCAL_WORLD_SIZE"] = "1"  # what Ray tells a worker; verl's vLLM rollout adapter reads it
    os.environ["RECIPES_CACHE"] = cache
