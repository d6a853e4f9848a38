"""Typed settings: one frozen dataclass per method (or section) under `recipes.<name>` in the Hydra
config. Each field says once what it means and where it comes from:

    @dataclass(frozen=True)
    class MySettings:
        strength: float = setting(0.1, ">= 0", "how strongly the thing is applied",
                                  paper="Someone et al. 2026, eq. 5")

`load(MySettings, cfg_section, "recipes.my_method")` builds it, and any unknown key, wrong type or
value out of range raises ConfigError naming the key. `python -m recipes.methods.registry` prints the
training reward's and every registered method's settings with their help and paper.
"""

from __future__ import annotations

import copy
import dataclasses
import math
import types
import typing
from collections.abc import Callable, Mapping
from typing import Any, Literal


class ConfigError(ValueError):
    """A config that cannot work, described in one sentence that names the key."""


# range name -> test; a field's `check` is one of these (or None for any value of its type)
def select(cfg, key: str):
    """`cfg`'s value at the dotted `key`, or None where the key or a section above it is missing
    (or the value is `???`)."""
    from omegaconf import OmegaConf

    return OmegaConf.select(cfg, key, throw_on_missing=False)


RANGES: dict[str, Callable[[Any], bool]] = {
    ">= 0": lambda x: x >= 0,
    ">= 1": lambda x: x >= 1,
    "> 0": lambda x: x > 0,
    "in (0, 1]": lambda x: 0 < x <= 1,
    "in (0, 300]": lambda x: 0 < x <= 300,
    "in [1, 256]": lambda x: 1 <= x <= 256,
}


def setting(default: Any, check: str | None, help: str, paper: str = "", yaml: str | None = None) -> Any:
    """A dataclass field with its allowed range, help text and paper reference. `yaml`: what the
    method's YAML writes instead of the default (an interpolation such as "${data.seed}")."""
    if check is not None and check not in RANGES:
        raise ValueError(f"unknown range {check!r}; known: {list(RANGES)}")
    mutable = isinstance(default, list | dict)
    factory = {"default_factory": lambda: copy.deepcopy(default)} if mutable else {"default": default}
    metadata = {"check": check, "help": help, "paper": paper, "yaml": yaml}
    return dataclasses.field(**factory, metadata=metadata)


def type_ok(value: Any, kind: Any) -> bool:
    origin = typing.get_origin(kind)
    if kind is Any:
        return True
    if origin is Literal:
        return value in typing.get_args(kind)
    if origin in (typing.Union, types.UnionType):
        return any(type_ok(value, k) for k in typing.get_args(kind))
    if kind is type(None):
        return value is None
    if kind is float:
        return isinstance(value, int | float) and not isinstance(value, bool)
    if kind is int:
        return isinstance(value, int) and not isinstance(value, bool)
    if origin is not None:  # list[str], dict[str, float]: the container type only
        return isinstance(value, origin)
    return isinstance(value, kind)


def type_name(kind: Any) -> str:
    origin = typing.get_origin(kind)
    if origin is Literal:
        return "one of " + ", ".join(repr(a) for a in typing.get_args(kind))
    if origin in (typing.Union, types.UnionType):
        return " or ".join(type_name(k) for k in typing.get_args(kind))
    if kind is type(None):
        return "null"
    return {int: "an integer", float: "a number", bool: "true or false", str: "a string"}.get(
        kind, getattr(origin or kind, "__name__", str(kind))
    )


def load(cls: type, values: Mapping | None, section: str):
    """`cls` from a mapping of settings; unknown keys, wrong types and out-of-range values raise
    ConfigError naming `section.key`."""
    values = dict(values or {})
    fields = {f.name: f for f in dataclasses.fields(cls)}
    unknown = sorted(set(values) - set(fields))
    if unknown:
        raise ConfigError(f"{section}: unknown settings {unknown}; known: {list(fields)}.")
    hints = typing.get_type_hints(cls)
    for name, value in values.items():
        kind, check = hints[name], fields[name].metadata.get("check")
        if not type_ok(value, kind):
            raise ConfigError(f"{section}.{name}={value!r} must be {type_name(kind)}.")
        if isinstance(value, float) and not math.isfinite(value):  # NaN passes no range; inf passes "> 0"
            raise ConfigError(f"{section}.{name}={value!r} must be a finite number.")
        if check is not None and value is not None and not RANGES[check](value):
            raise ConfigError(f"{section}.{name}={value!r} must be {check}.")
    if float in (hints[n] for n in values):  # ints given for float fields become floats
        values = {n: float(v) if hints[n] is float else v for n, v in values.items()}
    try:
        return cls(**values)
    except ValueError as exc:  # the dataclass's own cross-field checks (__post_init__)
        raise ConfigError(f"{section}: {exc}") from None


def _default(f: dataclasses.Field) -> Any:
    return f.default if f.default is not dataclasses.MISSING else f.default_factory()


def yaml_lines(cls: type, indent: str = "    ") -> list[str]:
    """Each setting as the method's YAML writes it (`key: default`), generated so that every
    default is written once, in the dataclass; Hydra needs the keys there to override them."""
    import json
    import re

    def value(f: dataclasses.Field) -> str:
        if f.metadata.get("yaml") is not None:
            return f.metadata["yaml"]
        v = _default(f)
        plain = (
            isinstance(v, str) and re.fullmatch(r"[A-Za-z][\w/.-]*", v) and v not in ("null", "true", "false")
        )
        return v if plain else json.dumps(v)

    return [f"{indent}{f.name}: {value(f)}" for f in dataclasses.fields(cls)]


def describe(cls: type, section: str) -> list[str]:
    """One line per setting: key, default, range, help, paper."""
    lines = []
    for f in dataclasses.fields(cls):
        default = _default(f)
        check = f" ({f.metadata['check']})" if f.metadata.get("check") else ""
        paper = f" [{f.metadata['paper']}]" if f.metadata.get("paper") else ""
        lines.append(f"  {section}.{f.name} = {default!r}{check}: {f.metadata.get('help', '')}{paper}")
    return lines


def markdown(sections: list[tuple[str, str, type]]) -> str:
    """docs/settings.md: one table per (title, config section, dataclass)."""
    out = [
        "# Settings",
        "",
        "Generated by `python -m recipes.methods.registry --markdown > docs/settings.md` from the settings",
        "dataclasses, where each setting is described once (a test checks this file is current).",
        "Override any of them on the command line as `<section>.<key>=<value>`.",
    ]
    for title, section, cls in sections:
        out += [
            "",
            f"## {title}",
            "",
            f"`{section}`",
            "",
            "| key | default | allowed | meaning | source |",
            "|---|---|---|---|---|",
        ]
        hints = typing.get_type_hints(cls)
        for f in dataclasses.fields(cls):
            default = _default(f)
            allowed = " ".join(x for x in (type_name(hints[f.name]), f.metadata.get("check")) if x)
            default = (
                "null" if default is None else str(default).lower() if isinstance(default, bool) else default
            )
            cells = [
                f"`{f.name}`",
                f"`{default}`",
                allowed,
                f.metadata.get("help", "").replace("|", "\\|"),
                f.metadata.get("paper", ""),
            ]
            out.append("| " + " | ".join(cells) + " |")
    return "\n".join(out) + "\n"
