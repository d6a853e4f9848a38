"""Symbols of an installed package read from its source files, without importing it: importing
verl takes seconds (torch, tensordict, Ray), vLLM more, and a contract check must answer in
under a second on a CPU.

A symbol is `module:Qual.name`: a module-level name of `module` (a def, a class, an assignment, an
import, which is followed to where it is defined, or a submodule), then attributes of it: a class's
methods, class attributes, and the attributes its methods assign to `self`, its bases' included
(resolved as the class's module names them). A module-level `__getattr__` that names the
attribute counts as defining it (vLLM's `current_platform`).
"""

from __future__ import annotations

import ast
import functools
import importlib.util
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

Node = ast.AST


@dataclass(frozen=True)
class Found:
    """Where a symbol is defined: `node` (a def, a class, an assignment) in `module`, or the module
    itself (`node` is its ast.Module)."""

    module: str
    node: Node
    source: str


class Sources:
    """Modules' syntax trees, found under the packages' install folders (`read` reads a file: a
    test may hand in a changed verl)."""

    def __init__(self, read: Callable[[Path], str] = Path.read_text) -> None:
        self.read = read
        self._trees: dict[str, tuple[ast.Module, str] | None] = {}

    # ------------------------------------------------------------------------------- modules
    def path(self, module: str) -> Path | None:
        top, _, rest = module.partition(".")
        try:
            spec = importlib.util.find_spec(top)  # a top-level package: found, not imported
        except (ImportError, ValueError):
            return None
        if spec is None or not spec.origin or not spec.origin.endswith(".py"):
            return None  # not installed, or built in, frozen, compiled: no source to read
        if not rest:
            return Path(spec.origin)
        if not spec.submodule_search_locations:
            return None
        base = Path(list(spec.submodule_search_locations)[0]).joinpath(*rest.split("."))
        return next((c for c in (base.with_suffix(".py"), base / "__init__.py") if c.is_file()), None)

    def tree(self, module: str) -> tuple[ast.Module, str] | None:
        if module not in self._trees:
            path = self.path(module)
            text = self.read(path) if path is not None else None
            self._trees[module] = (_parse(text), text) if text is not None else None
        return self._trees[module]

    def is_package(self, module: str) -> bool:
        path = self.path(module)
        return path is not None and path.name == "__init__.py"

    # ------------------------------------------------------------------------------- symbols
    def find(self, symbol: str) -> Found | None:
        """Where `symbol` ("module" or "module:Qual.name") is defined, or None."""
        module, _, qual = symbol.partition(":")
        found = self._module(module)
        for part in qual.split(".") if qual else ():
            if found is None:
                return None
            found = self._attribute(found, part)
        return found

    def _module(self, module: str) -> Found | None:
        tree = self.tree(module)
        return Found(module, tree[0], tree[1]) if tree is not None else None

    def _attribute(self, found: Found, name: str, seen: frozenset = frozenset()) -> Found | None:
        if isinstance(found.node, ast.Module):
            return self._global(found.module, name)
        if isinstance(found.node, ast.ClassDef):
            return self._member(found, name, seen)
        return None

    def _global(self, module: str, name: str, depth: int = 0) -> Found | None:
        """`name` in the namespace of `module`: defined there, imported (followed), a submodule."""
        tree = self.tree(module)
        if tree is None or depth > 20:
            return None
        binding = _binding(tree[0].body, name)
        if isinstance(binding, ast.ImportFrom):
            source = _absolute(module, binding, self.is_package(module))
            original = next(a.name for a in binding.names if (a.asname or a.name) == name)
            return self._global(source, original, depth + 1) or self._module(f"{source}.{original}")
        if isinstance(binding, ast.Import):
            alias = next(a for a in binding.names if (a.asname or a.name.split(".")[0]) == name)
            return self._module(alias.name if alias.asname else alias.name.split(".")[0])
        if binding is not None:
            return Found(module, binding, tree[1])
        for star in _star_imports(tree[0].body):  # `from .profiler import *`
            found = self._global(_absolute(module, star, self.is_package(module)), name, depth + 1)
            if found is not None:
                return found
        return self._module(f"{module}.{name}") or self._dynamic(module, tree, name)

    def _dynamic(self, module: str, tree: tuple[ast.Module, str], name: str) -> Found | None:
        """A module `__getattr__` that answers for `name`."""
        getattr_ = _binding(tree[0].body, "__getattr__")
        if isinstance(getattr_, ast.FunctionDef) and any(
            isinstance(n, ast.Constant) and n.value == name for n in ast.walk(getattr_)
        ):
            return Found(module, getattr_, tree[1])
        return None

    def _member(self, cls: Found, name: str, seen: frozenset) -> Found | None:
        """`name` of class `cls`: in its body, assigned to self in its methods, or in its bases."""
        if (cls.module, cls.node.name) in seen:
            return None
        seen = seen | {(cls.module, cls.node.name)}
        binding = _binding(cls.node.body, name)
        if binding is not None and not isinstance(binding, (ast.Import, ast.ImportFrom)):
            return Found(cls.module, binding, cls.source)
        for method in cls.node.body:
            if isinstance(method, (ast.FunctionDef, ast.AsyncFunctionDef)):
                for node in ast.walk(method):
                    if _assigns_self(node, name):
                        return Found(cls.module, node, cls.source)
        for base in self.bases(cls):
            found = self._member(base, name, seen)
            if found is not None:
                return found
        return None

    def member(self, found: Found, name: str) -> Found | None:
        """`name` of the class or module `found` names."""
        return self._attribute(found, name)

    def fields(self, cls: Found) -> tuple[str, ...] | None:
        """A @dataclass's fields in order (its bases' first), or None for another class."""
        if not any(
            _dotted(d.func if isinstance(d, ast.Call) else d) in ("dataclass", "dataclasses.dataclass")
            for d in cls.node.decorator_list
        ):
            return None
        inherited = [f for base in self.bases(cls) for f in (self.fields(base) or ())]
        own = [
            n.target.id
            for n in cls.node.body
            if isinstance(n, ast.AnnAssign) and isinstance(n.target, ast.Name)
        ]
        return tuple(dict.fromkeys([*inherited, *own]))

    def abstract_methods(self, cls: Found, seen: frozenset = frozenset()) -> set[str]:
        """The names `cls` and its bases declare @abstractmethod."""
        if (cls.module, cls.node.name) in seen:
            return set()
        out = {
            n.name
            for n in cls.node.body
            if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))
            and any(_dotted(d) in ("abstractmethod", "abc.abstractmethod") for d in n.decorator_list)
        }
        for base in self.bases(cls):
            out |= self.abstract_methods(base, seen | {(cls.module, cls.node.name)})
        return out

    def bases(self, cls: Found) -> list[Found]:
        """The classes `cls` derives from that can be read (not `object`, ABC, Generic, ...)."""
        out = []
        for expr in cls.node.bases:
            dotted = _dotted(expr)
            if dotted is None:
                continue
            head, *rest = dotted.split(".")
            found = self._global(cls.module, head)
            for part in rest:
                found = self._attribute(found, part) if found is not None else None
            if found is not None and isinstance(found.node, ast.ClassDef):
                out.append(found)
        return out


@functools.lru_cache(maxsize=256)
def _parse(text: str) -> ast.Module:
    """A source's tree, parsed once per process (trees are only read)."""
    return ast.parse(text)


def _binding(body: list[ast.stmt], name: str) -> Node | None:
    """The last statement of `body` (looking into if/try blocks) that binds `name`."""
    found = None
    for stmt in body:
        if isinstance(stmt, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)) and stmt.name == name:
            found = stmt
        elif isinstance(stmt, ast.Assign) and any(_binds(t, name) for t in stmt.targets):
            found = stmt
        elif isinstance(stmt, ast.AnnAssign) and _binds(stmt.target, name):
            found = stmt
        elif isinstance(stmt, ast.Import) and any(
            (a.asname or a.name.split(".")[0]) == name for a in stmt.names
        ):
            found = stmt
        elif isinstance(stmt, ast.ImportFrom) and any((a.asname or a.name) == name for a in stmt.names):
            found = stmt
        elif isinstance(stmt, ast.If):
            found = _binding(stmt.body, name) or _binding(stmt.orelse, name) or found
        elif isinstance(stmt, ast.With):  # verl's __version__, read from a file
            found = _binding(stmt.body, name) or found
        elif isinstance(stmt, ast.Try):
            blocks = [stmt.body, *(h.body for h in stmt.handlers), stmt.orelse, stmt.finalbody]
            found = next((b for b in (_binding(block, name) for block in blocks) if b), found)
    return found


def _star_imports(body: list[ast.stmt]) -> list[ast.ImportFrom]:
    out = []
    for stmt in body:
        if isinstance(stmt, ast.ImportFrom) and any(a.name == "*" for a in stmt.names):
            out.append(stmt)
        elif isinstance(stmt, ast.If):
            out += _star_imports(stmt.body) + _star_imports(stmt.orelse)
        elif isinstance(stmt, ast.Try):
            out += _star_imports(stmt.body)
    return out


def _binds(target: ast.expr, name: str) -> bool:
    if isinstance(target, ast.Name):
        return target.id == name
    if isinstance(target, (ast.Tuple, ast.List)):
        return any(_binds(t, name) for t in target.elts)
    return False


def _assigns_self(node: Node, name: str) -> bool:
    targets = []
    if isinstance(node, ast.Assign):
        targets = node.targets
    elif isinstance(node, (ast.AnnAssign, ast.AugAssign)):
        targets = [node.target]
    return any(
        isinstance(t, ast.Attribute)
        and t.attr == name
        and isinstance(t.value, ast.Name)
        and t.value.id == "self"
        for t in targets
    )


def _dotted(expr: ast.expr) -> str | None:
    if isinstance(expr, ast.Name):
        return expr.id
    if isinstance(expr, ast.Attribute):
        head = _dotted(expr.value)
        return f"{head}.{expr.attr}" if head else None
    if isinstance(expr, ast.Subscript):  # Generic[T], BaseModel[...]: the class subscripted
        return _dotted(expr.value)
    return None


def _absolute(module: str, node: ast.ImportFrom, package: bool) -> str:
    """The module an `from X import ...` in `module` names."""
    if not node.level:
        return node.module or ""
    parts = module.split(".")
    base = parts if package else parts[:-1]
    base = base[: len(base) - (node.level - 1)]
    return ".".join([*base, *([node.module] if node.module else [])])


# ------------------------------------------------------------------------------------ reading
def parameters(node: Node) -> tuple[str, ...] | None:
    """A def's parameter names as written (`*args`, `**kwargs` marked); None for anything else."""
    if not isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
        return None
    a = node.args
    names = [p.arg for p in (*a.posonlyargs, *a.args)]
    names += [f"*{a.vararg.arg}"] if a.vararg else []
    names += [p.arg for p in a.kwonlyargs]
    names += [f"**{a.kwarg.arg}"] if a.kwarg else []
    return tuple(names)


def calls(node: Node, name: str) -> bool:
    """`node`'s code calls something named `name` (`name(...)`, `x.name(...)`)."""
    for sub in ast.walk(node):
        if isinstance(sub, ast.Call):
            func = sub.func
            if (isinstance(func, ast.Attribute) and func.attr == name) or (
                isinstance(func, ast.Name) and func.id == name
            ):
                return True
    return False


def text(found: Found) -> str:
    """The source text of what `found` names (the whole module for a module)."""
    if isinstance(found.node, ast.Module):
        return found.source
    return ast.get_source_segment(found.source, found.node) or ""
