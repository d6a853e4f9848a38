"""`recipes.deterministic`: the same seed gives the same run, bit for bit, on a CPU.

What the setting needs at each stage:
  `check`             before Ray starts: refuses chunked prefill on a CPU (vLLM's CPU build
                      crashes on seeded requests prefilled in chunks)
  `prepare`           in the driver: exports RECIPES_DETERMINISTIC=1 or 0 (whatever the
                      environment held), and when on the rest of `ENV` (PYTHONHASHSEED=0,
                      CUBLAS_WORKSPACE_CONFIG) where unset, for every Ray process; without
                      chunked prefill, sets the rollout's `max_model_len` to prompt + response
                      length when unset and raises `max_num_batched_tokens` to it
  `request_seed`      each vLLM request's own seed, a pure function of the rollout seed and the
                      request's coordinates (recipes/extensions/agent_loop.py)
  `apply_in_process`  deterministic torch kernels in every verl process (recipes/extensions/plugins.py)
One sample order per step is the trainer's, always on (recipes/extensions/trainer.py). platform=cpu
turns the setting on; platform=gpu leaves it off (vLLM samples seeded requests one by one). What it
guarantees, and what stays nondeterministic on GPUs:
docs/running.md#reproducibility-the-same-seed-the-same-run.
"""

from __future__ import annotations

import hashlib
import os

from omegaconf import DictConfig, OmegaConf

from recipes.settings import ConfigError

KEY = "recipes.deterministic"
ENV_FLAG = "RECIPES_DETERMINISTIC"
# Exported before Ray starts, so every Ray worker (FSDP, vLLM, agent loop, reward) inherits them.
ENV = {ENV_FLAG: "1", "PYTHONHASHSEED": "0", "CUBLAS_WORKSPACE_CONFIG": ":4096:8"}


def enabled(cfg: DictConfig) -> bool:
    return bool(OmegaConf.select(cfg, KEY, default=False))


def request_seed(seed: int, *parts: object) -> int:
    """A vLLM request seed from the run's rollout seed and the request's coordinates
    (e.g. epoch, row, session): stable across processes and Python versions, below 2**31."""
    text = repr((int(seed), *parts)).encode()
    return int.from_bytes(hashlib.blake2b(text, digest_size=8).digest(), "little") >> 33  # < 2**31


def check(cfg: DictConfig) -> None:
    """Before Ray starts: vLLM's CPU build crashes on seeded requests with chunked prefill."""
    from recipes.platforms.registry import of  # here: the registry reads the platforms' modules

    if not enabled(cfg):
        return
    chunked = OmegaConf.select(cfg, "actor_rollout_ref.rollout.enable_chunked_prefill")
    if chunked and not of(cfg).seeded_chunked_prefill:
        raise ConfigError(
            f"{KEY}=true with actor_rollout_ref.rollout.enable_chunked_prefill=true: vLLM's CPU build "
            "crashes on seeded requests prefilled in chunks; platform=cpu sets it false."
        )


def prepare(cfg: DictConfig) -> None:
    """In the driver, before Ray starts: the environment every process reads, and vLLM's lengths
    without chunked prefill (mutates `cfg`)."""
    os.environ[ENV_FLAG] = "1" if enabled(cfg) else "0"  # not one an earlier run left behind
    if enabled(cfg):
        for name, value in ENV.items():
            os.environ.setdefault(name, value)
    rollout = cfg.actor_rollout_ref.rollout
    if not rollout.enable_chunked_prefill:
        if rollout.max_model_len is None:
            rollout.max_model_len = int(cfg.data.max_prompt_length) + int(cfg.data.max_response_length)
        rollout.max_num_batched_tokens = max(int(rollout.max_num_batched_tokens), int(rollout.max_model_len))


def apply_in_process() -> None:
    """In each verl process (recipes/extensions/plugins.py), when the driver exported RECIPES_DETERMINISTIC."""
    if os.environ.get(ENV_FLAG) == "1":
        import torch

        torch.use_deterministic_algorithms(True, warn_only=True)
