"""The seam check: verl is the version we extend and every verl process holds our registrations,
said in one line (ConfigError) before Ray starts. verl loads our plugin (recipes/extensions/plugins.py)
at DEBUG level and hides its import errors, and a registration that is missing fails only inside a
Ray actor, minutes into a launch.

`VerlSeam` checks the methods' names (recipes/methods/manifest.py `registers`) in a fresh
interpreter, as a Ray worker starts, while the caller goes on checking the config;
`seam_in_process` checks the rest here. recipes.train runs both before it prepares anything.
A fresh interpreter that passed is remembered in the cache folder (`$RECIPES_CACHE/seam/`) under a
fingerprint of everything its result depends on (`fingerprint`), so the next launch of the same
code skips it; any change to that code, verl or the environment checks again.
"""

from __future__ import annotations

import hashlib
import importlib.metadata
import importlib.util
import json
import os
import subprocess
import sys
import weakref
from pathlib import Path

from recipes.files import atomic_write_text, cache_dir
from recipes.settings import ConfigError


def _one_line(exc: BaseException) -> str:
    text = str(exc).strip() or type(exc).__name__
    return " ".join(text.split())[:500]


# What the seam check's fresh interpreter runs: `import verl` loads our plugin through its entry
# point, as in every verl process; then recipes.extensions.plugins.check_method_names.
_SEAM = """
import json, sys
import verl
if "recipes.extensions.plugins" not in sys.modules:
    print("verl did not load our plugin (recipes.extensions.plugins): is this package installed "
          "(pip install -e .) so verl finds its `verl.plugins` entry point?")
    sys.exit(2)
from recipes.extensions.plugins import SeamError, check_method_names
try:
    check_method_names([tuple(e) for e in json.loads(sys.argv[1])])
except SeamError as exc:
    print(exc)
    sys.exit(2)
"""


def fingerprint(expected: str, roots: list[Path] | None = None) -> str:
    """What a fresh interpreter's seam check depends on, hashed: the declarations it checks
    (`expected`), this interpreter and the environment it would start in (working folder,
    PYTHONPATH), where verl is, every installed distribution and its version (verl's, and any
    upgrade that could break importing it), the `verl.plugins` entry points verl loads, and the
    content of every Python file of our packages (`roots`: by default the top-level packages of
    the distributions that give verl a plugin, found where this process and so the fresh
    interpreter, from the same folder and PYTHONPATH, import them)."""
    entry_points = importlib.metadata.entry_points(group="verl.plugins")
    plugins = sorted(f"{e.name}={e.value}@{e.dist.name if e.dist else ''}" for e in entry_points)
    roots = packages(entry_points) if roots is None else roots
    # as a fresh interpreter finds them: without the folder `import ray` puts on sys.path (its
    # vendored colorama), which made every launch that imported ray before this a new key
    path = [p for p in sys.path if Path(p).parts[-2:] != ("ray", "thirdparty_files")]
    installed = sorted(f"{d.name}=={d.version}" for d in importlib.metadata.distributions(path=path))
    verl = importlib.util.find_spec("verl")  # where it is, without importing it
    environment = (sys.executable, sys.version, os.getcwd(), os.environ.get("PYTHONPATH", ""))
    h = hashlib.sha256()
    for part in (expected, *environment, verl.origin if verl else "", *installed, *plugins):
        h.update(str(part).encode() + b"\0")
    for root in roots:
        for path in sorted(root.rglob("*.py")):
            h.update(str(path).encode() + b"\0" + path.read_bytes() + b"\0")
    return h.hexdigest()


def packages(entry_points) -> list[Path]:
    """The folders of the top-level packages of the distributions that give verl a plugin (ours:
    recipes and the packages beside it), where this process finds them."""
    names = {"recipes"}
    for e in entry_points:
        names |= set(((e.dist and e.dist.read_text("top_level.txt")) or "").split())
    specs = [importlib.util.find_spec(name) for name in sorted(names)]
    return [Path(s.origin).parent for s in specs if s is not None and s.origin]


def _passed_file(key: str) -> Path:
    return cache_dir() / "seam" / f"{key}.passed"


def _stop(proc: subprocess.Popen) -> None:
    if proc.poll() is None:
        proc.kill()
        proc.wait()


class VerlSeam:
    """verl is the version we extend and holds our registrations, said in one line (ConfigError).
    Ours that are not a method's are checked in this process (`seam_in_process`). The methods'
    names are checked in a fresh interpreter, as a Ray worker starts (recipes.extensions.plugins
    `check_method_names`): there only our plugin can have imported a method's module,
    whereas this process has imported every one through the registry, so a method whose plugin
    wiring is missing would pass here and fail minutes later inside a Ray actor. The interpreter
    starts when this object is made and runs while the caller checks the config; `join` waits.
    What it checks comes from this process's declarations (recipes/methods/manifest.py). A process
    that launches several times (tests, tools), and any later process, whose code, verl and
    environment have the same fingerprint, finds the pass (in this process, or in the cache folder)
    and starts no interpreter."""

    passed: set[str] = set()  # the fingerprints a fresh interpreter of this process confirmed

    def __init__(self) -> None:
        from recipes.methods import manifest

        self.expected = json.dumps(manifest.expected_names())
        self.key = fingerprint(self.expected)
        self.proc = None
        if self.key not in VerlSeam.passed and not _passed_file(self.key).is_file():
            self.proc = subprocess.Popen(
                [sys.executable, "-c", _SEAM, self.expected],
                stdin=subprocess.DEVNULL,
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                text=True,
            )
            weakref.finalize(self, _stop, self.proc)  # a caller that fails first does not wait for it

    def join(self, timeout: float = 600.0) -> None:
        seam_in_process()
        if self.proc is None:
            return
        try:
            out, err = self.proc.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            _stop(self.proc)
            raise ConfigError(
                f"the verl seam check (a fresh interpreter importing verl) took more than {timeout:.0f} s."
            ) from None
        if self.proc.returncode == 2:
            raise ConfigError(" ".join(out.split()))
        if self.proc.returncode:
            last = [line for line in err.splitlines() if line.strip()][-1:] or ["no output"]
            raise ConfigError(
                f"our verl plugin (recipes.extensions.plugins) fails in a fresh interpreter: {last[0]}"
            )
        VerlSeam.passed.add(self.key)
        try:  # a cache folder that cannot be written only means checking again next time
            atomic_write_text(_passed_file(self.key), self.expected)
        except OSError:
            pass


def seam_in_process() -> None:
    """The seam check's part in this process: verl's version and our registrations that are not a
    method's (recipes.extensions.plugins `check_verl_seam`), and every name a method's module has
    registered with verl here is in its declaration, since the plugin imports a method's module in
    verl's workers only for what it declares."""
    try:
        from recipes.extensions.plugins import SeamError, check_verl_seam
    except Exception as exc:  # noqa: BLE001 - verl would hide it at DEBUG level
        raise ConfigError(
            f"our verl plugin (recipes.extensions.plugins) does not import: {_one_line(exc)}"
        ) from exc
    try:
        check_verl_seam()
    except SeamError as exc:
        raise ConfigError(str(exc)) from None
    from recipes.methods import registry

    undeclared = registry.undeclared()
    if undeclared:
        raise ConfigError(
            f"{', '.join(undeclared)}: registered with verl but not declared in recipes/methods/manifest.py "
            "(`registers`), so no verl worker would import its module (docs/adding_a_method.md)."
        )


def check() -> None:
    """The whole seam check, waited for."""
    VerlSeam().join()
