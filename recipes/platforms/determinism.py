"""`recipes.deterministic`: the same seed gives the same run, bit for bit, on a CPU.

What makes two launches of one config differ, and what this setting does about each:

  rollout sampling   vLLM draws every token from one engine-wide generator, so a response depends
                     on which requests share a batch and in what order they arrived. On: each
                     request carries its own seed, a pure function of (actor_rollout_ref.rollout.seed,
                     epoch, row, session) for training rows and (seed, "val", row, session) for
                     validation rows (recipes/extensions/agent_loop.py). A resumed run draws the seeds the uninterrupted
                     run would have drawn.
  sample order       TransferQueue hands the trainer a step's responses in the order they finished.
                     Always (not only when on): rows get uids from the dataloader fetch count and
                     the step's batch is sorted by key (recipes/extensions/trainer.py), so mini-batches and
                     gradient sums see the samples in one order.
  torch kernels      On: `torch.use_deterministic_algorithms(True, warn_only=True)` in every verl
                     process, `CUBLAS_WORKSPACE_CONFIG=:4096:8`, `PYTHONHASHSEED=0`. Thread counts
                     come from the environment Ray gives each worker (OMP_NUM_THREADS) and from
                     vLLM's thread binding: the same from launch to launch on one machine.
  chunked prefill    vLLM's CPU build crashes on a seeded request whose prompt is prefilled in
                     chunks: platform=cpu turns chunked prefill off. vLLM then needs
                     `max_num_batched_tokens` >= `max_model_len`, which verl defaults to the model's
                     whole context (2,048 tokens for the tiny model, 8,192 for SmolLM2; a larger
                     batch makes the engine's warm-up longer) and cannot raise itself (its config is
                     frozen by then): before Ray starts, `max_model_len` is set to prompt + response
                     length when unset, and `max_num_batched_tokens` raised to it when lower.

What stays nondeterministic: on GPUs, vLLM's kernels are not batch-invariant (a request's logits
depend on its batch), so seeded requests give the same tokens only as long as those logits agree
to the last bit; DAPO's dynamic sampling (`algorithm.filter_groups`) keeps the groups that finish
first, which depends on timing. Per-request seeds cost little on a CPU; on a GPU vLLM samples
seeded requests one by one, so `platform=gpu` leaves this off.
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
    if not enabled(cfg):
        return
    chunked = OmegaConf.select(cfg, "actor_rollout_ref.rollout.enable_chunked_prefill")
    if OmegaConf.select(cfg, "recipes.platform") == "cpu" and chunked:
        raise ConfigError(
            f"{KEY}=true with actor_rollout_ref.rollout.enable_chunked_prefill=true: vLLM's CPU build "
            "crashes on seeded requests prefilled in chunks; platform=cpu sets it false."
        )


def prepare(cfg: DictConfig) -> None:
    """In the driver, before Ray starts: the environment every process reads, and vLLM's lengths
    without chunked prefill (mutates `cfg`)."""
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
