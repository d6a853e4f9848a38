"""Our contract with verl and vLLM: every symbol of theirs this project overrides, patches,
registers with or calls outside their documented use, with what it assumes of each
(recipes/verl_contract/uses.py), checked against the installed sources in under a second.

    python -m recipes.verl_contract              one line per symbol that moved (exit 1), else "ok"
    python -m recipes.verl_contract --markdown   the contract as docs/verl_contract.md

The check reads verl's and vLLM's source files, without importing them (recipes/verl_contract/source.py):
each symbol must exist, a callable with the parameter names listed, a verl function that must call
it must still call it, a class must still have the members listed, a class we implement must have no
abstract method we lack. `unlisted` finds what the table misses: every verl or vLLM name our modules
import, every method our subclasses override, every verl module they hook by name.
tests/test_verl_contract.py runs both, and keeps docs/verl_contract.md equal to `markdown()`.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

from recipes.verl_contract.source import Found, Sources, calls, parameters, text
from recipes.verl_contract.uses import USES, Use

REPO = Path(__file__).resolve().parents[2]
# our packages whose use of verl and vLLM the table covers: every top-level package (scripts/ and
# tests/ are not packages)
PACKAGES = tuple(sorted(p.parent.name for p in REPO.glob("*/__init__.py")))
THEIRS = ("verl", "vllm")


# ---------------------------------------------------------------------------------- the check
def problems(sources: Sources | None = None) -> list[str]:
    """One line per listed symbol the installed packages no longer provide as the table says."""
    sources = sources or Sources()
    return [
        f"{use.symbol} ({where}, {use.how}): {problem}"
        for where, uses in USES.items()
        for use in uses
        for problem in check(sources, use)
    ]


def check(sources: Sources, use: Use) -> list[str]:
    found = sources.find(use.symbol)
    if found is None:
        return ["not found"]
    out = []
    if use.params is not None:
        have, want = signature(sources, found), tuple(use.params.split())
        if have != want:
            out.append(f"parameters ({', '.join(have or ('not callable',))}), expected ({', '.join(want)})")
    if use.called_by:
        caller = sources.find(use.called_by)
        if caller is None or not calls(caller.node, use.symbol.rpartition(".")[2]):
            out.append(f"no longer called by {use.called_by}")
    if use.mentions and use.mentions not in text(found):
        out.append(f"its source no longer contains {use.mentions!r}")
    members = use.members.split() if use.members else []
    missing = [m for m in members if sources.member(found, m) is None]
    if missing:
        out.append(f"has no {', '.join(missing)}")
    if use.how == "subclass" and members:
        ours = set(members) | {
            u.symbol[len(use.symbol) + 1 :] for u in _all() if u.symbol.startswith(f"{use.symbol}.")
        }
        lacking = sorted(sources.abstract_methods(found) - ours)
        if lacking:
            out.append(f"abstract methods we do not implement: {', '.join(lacking)}")
    return out


def signature(sources: Sources, found: Found) -> tuple[str, ...] | None:
    """A def's parameters; a class's `__init__`'s, or a dataclass's fields after self."""
    if not isinstance(found.node, ast.ClassDef):
        return parameters(found.node)
    init = sources.member(found, "__init__")
    if init is not None:
        return parameters(init.node)
    fields = sources.fields(found)
    return ("self", *fields) if fields is not None else None


def _all() -> list[Use]:
    return [use for uses in USES.values() for use in uses]


# ------------------------------------------------------------------------- what the table misses
def unlisted(sources: Sources | None = None, repo: Path = REPO) -> list[str]:
    """verl and vLLM symbols our modules reach that the table does not list: `file: symbol`."""
    sources = sources or Sources()
    listed = {use.symbol for uses in USES.values() for use in uses}
    members = {(use.symbol, m) for uses in USES.values() for use in uses for m in (use.members or "").split()}
    with_params = {use.symbol for uses in USES.values() for use in uses if use.params is not None}

    def covered(symbol: str) -> bool:
        owner, _, name = symbol.rpartition(".")
        if symbol in listed or any(s.startswith(f"{symbol}.") for s in listed):
            return True  # listed, or a class of which we list what we use
        if ":" in symbol and (owner, name) in members:
            return True
        return name == "__init__" and owner in with_params  # a class listed with its __init__'s parameters

    out = []
    for pkg in PACKAGES:
        for path in sorted((repo / pkg).rglob("*.py")):
            rel = path.relative_to(repo).as_posix()
            reached = _reached(sources, ast.parse(path.read_text()))
            out += [
                f"{rel}: {s}" for s in sorted(reached) if not covered(s) and not _module_covered(s, listed)
            ]
    return out


def _module_covered(symbol: str, listed: set[str]) -> bool:
    """A module we import or hook: listed itself, or through a symbol in it."""
    return ":" not in symbol and any(s == symbol or s.startswith(f"{symbol}:") for s in listed)


def _reached(sources: Sources, tree: ast.Module) -> set[str]:
    """The verl and vLLM symbols a module of ours imports, overrides, or names as a module."""
    imported: dict[str, str] = {}  # local name -> symbol
    reached = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and (node.module or "").split(".")[0] in THEIRS:
            for alias in node.names:
                module = f"{node.module}.{alias.name}"
                symbol = module if sources.path(module) is not None else f"{node.module}:{alias.name}"
                imported[alias.asname or alias.name] = symbol
                reached.add(symbol)
        elif isinstance(node, ast.Import):
            reached |= {a.name for a in node.names if a.name.split(".")[0] in THEIRS}
        elif isinstance(node, ast.Constant) and isinstance(node.value, str):
            if re.fullmatch(r"(verl|vllm)(\.\w+)+", node.value) and sources.path(node.value) is not None:
                reached.add(node.value)  # a module hooked by name (PATCHES, AFTER_IMPORT)
    for node in ast.walk(tree):
        if isinstance(node, ast.ClassDef):
            for base in (imported.get(b.id) for b in node.bases if isinstance(b, ast.Name)):
                reached |= _overrides(sources, node, base) if base else set()
    return reached


def _overrides(sources: Sources, cls: ast.ClassDef, base: str) -> set[str]:
    found = sources.find(base)
    if found is None or not isinstance(found.node, ast.ClassDef):
        return set()
    defs = [n.name for n in cls.body if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))]
    return {f"{base}.{name}" for name in defs if sources.member(found, name) is not None}


# ------------------------------------------------------------------------------------ the doc
INTRO = """# Our contract with verl and vLLM

This project extends verl 0.9.1 and vLLM 0.24.0 without editing them: it subclasses verl's trainer,
agent loop, reward manager, rollout and worker classes, overrides their private methods, patches
functions of theirs as a process imports them, and registers names in their registries. None of that
is verl's public API, so a verl upgrade may move any of it. This page lists every such symbol, by
the file of ours that reaches it, with what our code assumes of it.

It is generated from `recipes/verl_contract/uses.py` (`python -m recipes.verl_contract --markdown`),
and `tests/test_verl_contract.py` holds the two equal. The same test reads the installed verl's and
vLLM's sources (without importing them, in under a second) and fails, naming each symbol, when one
is gone, takes other parameters, is no longer called where our override expects it, or lost a member
we use; and when our code reaches a verl or vLLM symbol this table does not list.

To upgrade verl: install the new version, run `python -m recipes.verl_contract`, which prints one
line per symbol that moved; read each one's row below, fix our side, update the row (its parameters
or assumption), regenerate this page, and raise `VERL_VERSION` in `recipes/extensions/plugins.py`,
the version check every launch makes before Ray starts. What the table cannot see is behaviour
behind an unchanged name: that is what the end-to-end tests (`tests/test_train_e2e.py`,
`tests/test_cpu_platform.py`) are for.

How: `subclass`, `override` (verl calls our method instead of its own), `wrap` (a patch that calls
verl's original), `replace` (a patch that does not), `register`, `call`, `read`, `hook` (a verl module
our `verl.plugins` entry point patches or registers with once a process imports it), `mirror` (our
class answers the calls verl makes on theirs). Parameters are the names verl's source writes.
"""


def markdown() -> str:
    lines = [INTRO]
    for where, uses in USES.items():
        lines += [f"## `{where}`", "", "| symbol | how | parameters | what we assume |", "|---|---|---|---|"]
        for use in uses:
            lines.append(f"| `{use.symbol}` | {use.how} | {_params(use)} | {_assumes(use)} |")
        lines.append("")
    return "\n".join(lines)


def _params(use: Use) -> str:
    return f"`({', '.join(use.params.split())})`" if use.params is not None else ""


def _assumes(use: Use) -> str:
    out = use.assumes if use.assumes.endswith(".") else f"{use.assumes}."
    if use.called_by:
        out += f" Called by `{use.called_by.partition(':')[2]}`."
    if use.mentions:
        out += f" Its source has `{use.mentions}`."
    if use.members:
        out += f" Members: {', '.join(f'`{m}`' for m in use.members.split())}."
    return out.replace("|", "\\|")


def main(argv: list[str]) -> int:
    import argparse

    p = argparse.ArgumentParser(
        prog="python -m recipes.verl_contract",
        description="Check every verl and vLLM symbol this project overrides, patches or calls privately against "
        "the installed sources (docs/verl_contract.md): one line per symbol that moved, then `ok` or a count.",
        epilog="exit status: 0 nothing moved; 1 something moved or is not in the contract; 2 a bad option",
    )
    p.add_argument("--markdown", action="store_true", help="print docs/verl_contract.md instead")
    if p.parse_args(argv).markdown:
        print(markdown(), end="")
        return 0
    sources = Sources()
    moved = problems(sources) + [f"not in the contract: {line}" for line in unlisted(sources)]
    for line in moved:
        print(line)
    print(f"{len(moved)} symbol(s) moved or unlisted (docs/verl_contract.md)" if moved else "ok")
    return 1 if moved else 0
