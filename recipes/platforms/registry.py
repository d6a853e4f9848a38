"""The platforms a run executes on, registered in one place (`PLATFORMS` at the bottom), as the
methods are in recipes/methods/registry.py.

`platform=<name>` (configs/platform/<name>.yaml) sets `recipes.platform`; every part of the project
that acts differently by platform asks `of(cfg)` (or, in a verl process, `in_process()`) for its
`Platform` and reads what it holds, instead of comparing the name:

  environment  what recipes.train exports before Ray starts, so that every Ray process inherits it
  check        its config checks, before Ray starts (recipes/checks.py)
  preflight    what it decides and checks in the driver before Ray starts; returns the console's
               notes (recipes.train)
  session      what the trainer runs inside, after saying how the rollout and the training compute
               (recipes.train)
  patches      verl module -> the patch to apply once a process has imported it, in every verl
               process whose VERL_PLATFORM selects the platform (recipes/extensions/plugins.py)
  host_memory  the run's memory is the host's RAM: recipes.plan counts float32 weights and the
               processes' RAM, and has no time model
  seeded_chunked_prefill  vLLM takes seeded requests prefilled in chunks (recipes.deterministic)

Imports nothing heavy: recipes/extensions/plugins.py reads it in every verl process.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from recipes.platforms import cpu, gpu
from recipes.settings import ConfigError, select

if TYPE_CHECKING:
    from omegaconf import DictConfig

KEY = "recipes.platform"
Say = Callable[[str], None]


def _no_check(cfg: DictConfig) -> None:
    return None


def _no_notes(cfg: DictConfig) -> list[str]:
    return []


def _no_session(cfg: DictConfig, say: Say, training: str) -> contextlib.AbstractContextManager:
    """Nothing around the trainer; says how the training computes when there is something to say."""
    if training:
        say(f"training: {training}")
    return contextlib.nullcontext()


@dataclass(frozen=True)
class Platform:
    name: str
    summary: str
    # the VERL_PLATFORM value that selects it in verl's processes (None: verl's own detection)
    verl_platform: str | None = None
    environment: dict[str, str] = field(default_factory=dict)
    check: Callable[[DictConfig], None] = _no_check
    preflight: Callable[[DictConfig], list[str]] = _no_notes
    # (cfg, say, what the training's line adds, e.g. the on-policy note) -> the trainer's context
    session: Callable[[DictConfig, Say, str], contextlib.AbstractContextManager] = _no_session
    patches: dict[str, Callable[[], object]] = field(default_factory=dict)
    host_memory: bool = False
    seeded_chunked_prefill: bool = True


def named(name: object) -> Platform:
    """The platform registered as `name`; ConfigError otherwise."""
    if name not in PLATFORMS:
        raise ConfigError(
            f"{KEY}={name}: not a platform; choose one of {', '.join(sorted(PLATFORMS))} "
            "(platform=NAME, configs/platform/)."
        )
    return PLATFORMS[str(name)]


def of(cfg: DictConfig) -> Platform:
    """The platform `cfg` runs on (`recipes.platform`)."""
    return named(select(cfg, KEY))


def in_process(environ: Mapping[str, str] | None = None) -> Platform:
    """The platform of this verl process, as VERL_PLATFORM (exported by recipes.train) selects it;
    the platform verl detects itself (gpu) when none of ours is selected."""
    wanted = (os.environ if environ is None else environ).get("VERL_PLATFORM")
    return next(
        (p for p in PLATFORMS.values() if p.verl_platform and p.verl_platform == wanted), PLATFORMS["gpu"]
    )


PLATFORMS: dict[str, Platform] = {
    p.name: p
    for p in (
        Platform(
            "gpu",
            "NVIDIA GPUs: vLLM rollouts sharing the GPUs with the FSDP2 actor (configs/platform/gpu.yaml)",
            preflight=gpu.preflight,
        ),
        Platform(
            "cpu",
            "no accelerator: verl's trainer and its vLLM server on vLLM's CPU build (docs/cpu_platform.md)",
            verl_platform=cpu.CPU_ENV["VERL_PLATFORM"],
            environment=cpu.CPU_ENV,
            check=cpu.check,
            session=cpu.session,
            patches=cpu.PATCHES,
            host_memory=True,
            # vLLM's CPU build crashes on seeded requests prefilled in chunks
            seeded_chunked_prefill=False,
        ),
    )
}
