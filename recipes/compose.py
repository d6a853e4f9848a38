"""A run's config as `python -m recipes.train OVERRIDES` composes it, for the entry point, the
tools and the tests: Hydra's composition of configs/train.yaml over verl's own configs, the group
aliases (`model=X`), the choices recorded in `recipes.*`, each active method's `configure` (what it
implies, whatever the order of `method=[...]`), and a command line split into Hydra's overrides and
its flags; Hydra's errors as one config error line; the run's planned step count. `recipes.train`
re-exports these names."""

from __future__ import annotations

import contextlib
import os
import sys
from pathlib import Path
from typing import NoReturn

from omegaconf import DictConfig, OmegaConf, open_dict

from recipes import run_folder
from recipes.console import held
from recipes.methods.configure import configure
from recipes.settings import ConfigError, select

# verl's defaults list holds the `model` group twice (actor and critic): `model=X` means the actor's.
GROUP_ALIASES = {"model": "model@actor_rollout_ref.model"}


def translate_overrides(args: list[str]) -> list[str]:
    """`model=X` (and `+model=X`, `~model`) -> `model@actor_rollout_ref.model=X`."""
    out = []
    for arg in args:
        for short, full in GROUP_ALIASES.items():
            for prefix in ("", "+", "++", "~"):
                if arg.startswith(f"{prefix}{short}=") or arg == f"{prefix}{short}":
                    arg = prefix + full + arg[len(prefix) + len(short) :]
        out.append(arg)
    return out


def record_choices(cfg: DictConfig, choices: dict, overrides: list[str] = ()) -> None:
    """Copy the `model` and `data` group choices into recipes.model / recipes.data, and the keys
    the command line added with a single `+` into recipes.added_keys (checked by validate)."""
    with open_dict(cfg):
        cfg.recipes.model = choices.get(GROUP_ALIASES["model"])
        cfg.recipes.data = choices.get("data")
        if cfg.trainer.experiment_name is None:
            cfg.trainer.experiment_name = run_folder.run_name(cfg)
        cfg.recipes.added_keys = [
            o[1:].split("=", 1)[0]
            for o in overrides
            if o.startswith("+") and not o.startswith("++") and "=" in o
        ]


CONFIG_DIR = run_folder.CONFIG_DIR


def verl_searchpath() -> str:
    """The override that points Hydra at verl's own configs as a folder. configs/train.yaml names
    them `pkg://verl.trainer.config`, which makes Hydra import verl (seconds of CPU) before it can
    report even a misspelt key; the folder is found without importing it."""
    import importlib.util

    folder = Path(importlib.util.find_spec("verl").submodule_search_locations[0]) / "trainer" / "config"
    quoted = str(folder).replace("\\", "\\\\").replace("'", "\\'")
    return f"hydra.searchpath=['file://{quoted}']"


# Config files parsed by this process, by (path, modification time, size). Hydra reads and parses
# each of the ~35 YAML files of a composition again on every compose (a third of its 0.64 s); tools
# and tests compose many configs in one process.
_PARSED: dict[tuple[str, int, int], object] = {}


@contextlib.contextmanager
def _each_file_parsed_once():
    """Within the block, Hydra's file loader hands out a copy of what it parsed before."""
    import copy

    from hydra._internal.core_plugins.file_config_source import FileConfigSource
    from hydra.plugins.config_source import ConfigResult

    load = FileConfigSource.load_config

    def load_once(self, config_path: str):
        path = os.path.realpath(os.path.join(self.path, self._normalize_file_name(config_path)))
        try:
            st = os.stat(path)
        except OSError:
            return load(self, config_path)  # Hydra's own "Config not found"
        key = (path, st.st_mtime_ns, st.st_size)
        if key not in _PARSED:
            _PARSED[key] = load(self, config_path)
        done = _PARSED[key]
        return ConfigResult(
            config=copy.deepcopy(done.config),
            path=done.path,
            provider=done.provider,
            header=dict(done.header),
        )

    FileConfigSource.load_config = load_once
    try:
        yield
    finally:
        FileConfigSource.load_config = load


def compose(overrides: list[str]) -> DictConfig:
    """The config `python -m recipes.train *overrides` would run with (for tests and tools)."""
    from hydra import compose as hydra_compose
    from hydra import initialize_config_dir

    overrides = translate_overrides(list(overrides))
    with initialize_config_dir(str(CONFIG_DIR), version_base=None), _each_file_parsed_once():
        ours = [] if any(o.startswith("hydra.searchpath=") for o in overrides) else [verl_searchpath()]
        cfg = hydra_compose("train", overrides=[*ours, *overrides], return_hydra_config=True)
    choices = dict(cfg.hydra.runtime.choices)
    with open_dict(cfg):
        del cfg["hydra"]
    record_choices(cfg, choices, overrides)
    configure(cfg, overrides, choices.get("experiment"))  # what each method implies, in any order
    return cfg


def hydra_args(args: list[str]) -> tuple[list[str], dict[str, object]]:
    """A command line as Hydra reads it: its overrides, and its own flags ({"--cfg": "job"}),
    wherever they stand (Hydra itself refuses an override after a flag). An argument it does
    not know is a ConfigError."""
    import argparse

    from hydra._internal.utils import get_args_parser

    parser = get_args_parser()
    parser.exit_on_error = False
    try:
        parsed, unknown = parser.parse_known_intermixed_args(args)
    except argparse.ArgumentError as exc:
        raise ConfigError(f"{exc} (python -m recipes.train --help).") from None
    if unknown:
        first = next((a for a in unknown if a.startswith("-")), unknown[0])
        raise ConfigError(f"{first}: not an argument of python -m recipes.train (--help lists them).")
    flags = {}
    for action in parser._actions:
        value = getattr(parsed, action.dest, action.default)  # --version has no value
        if action.option_strings and value != action.default:
            flags[action.option_strings[0]] = value
    return parsed.overrides, flags


def flag_args(flags: dict[str, object]) -> list[str]:
    return [a for flag, value in flags.items() for a in ([flag] if value is True else [flag, str(value)])]


def config_error(exc: ConfigError) -> NoReturn:
    """A bad input's one line, and exit 2."""
    print(f"config error: {exc}", file=sys.stderr, flush=True)
    sys.exit(2)


# Hydra's flags that print the composed config: with them (or none) the command line composes
PRINTING = ("--cfg", "--resolve", "--package")


def check_overrides(args: list[str], verbose: bool = False) -> DictConfig | None:
    """Hydra's own errors (an unknown group option, a key not in the config, a bad override) as
    one `config error:` line and exit 2, before Hydra prints its own report and exits 1. What
    importing verl prints on the way (platform detection) is dropped unless `verbose`. The
    composed config (None with Hydra's flags other than PRINTING: -m sweeps, other config
    folders, --info)."""
    try:
        overrides, flags = hydra_args(args)
    except ConfigError as exc:
        config_error(exc)
    if set(flags) - set(PRINTING):
        return None
    import yaml
    from hydra.errors import HydraException
    from omegaconf.errors import OmegaConfBaseException

    errors = (HydraException, OmegaConfBaseException, yaml.YAMLError)
    try:
        with held(enabled=not verbose, expected=(*errors, ConfigError)):
            cfg = compose(overrides)
            # every interpolation resolves (`${oc.env:UNSET}` failed later, with a traceback)
            OmegaConf.to_container(cfg, resolve=True)
            return cfg
    except errors as exc:
        text = str(exc).split("Config search path", 1)[0]  # where Hydra looked: noise here
        if isinstance(exc, yaml.YAMLError):  # a config file that is not YAML: where, then what
            text = f"not valid YAML: {text}"
        print(f"config error: {' '.join(text.split())[:600]}", file=sys.stderr, flush=True)
        sys.exit(2)
    except ConfigError as exc:  # a method's configure step (recipes/methods/configure.py)
        config_error(exc)


def planned_steps(cfg: DictConfig) -> int | None:
    """The run's step count: trainer.total_training_steps, else epochs x (train rows // batch),
    as verl counts them (it drops the last partial batch; rows it filters out are not known here)."""
    total = select(cfg, "trainer.total_training_steps")
    if total:
        return int(total)
    try:
        import pyarrow.parquet as pq

        files = select(cfg, "data.train_files")
        files = [files] if isinstance(files, str) else list(files or [])
        rows = sum(pq.ParquetFile(f).metadata.num_rows for f in files)
    except Exception:  # noqa: BLE001 - no ETA rather than no run
        return None
    cap = select(cfg, "data.train_max_samples")
    if cap and int(cap) > 0:
        rows = min(rows, int(cap))
    return int(select(cfg, "trainer.total_epochs") or 1) * (rows // int(select(cfg, "data.train_batch_size")))
