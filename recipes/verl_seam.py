"""The seam check: verl is the version we extend and every verl process holds our registrations,
said in one line (ConfigError) before Ray starts. verl loads our plugin (recipes/extensions/plugins.py)
at DEBUG level and hides its import errors, and a registration that is missing fails only inside a
Ray actor, minutes into a launch.

`VerlSeam` checks the methods' names (recipes/methods/manifest.py `registers`) in a fresh
interpreter, as a Ray worker starts, while the caller goes on checking the config;
`seam_in_process` checks the rest here. recipes.train runs both before it prepares anything.
"""

from __future__ import annotations

import json
import subprocess
import sys
import weakref

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
    that launches several times (tests, tools) checks the same declarations once: the installed
    code does not change under it."""

    passed: set[str] = set()  # the declarations (as JSON) a fresh interpreter of this process confirmed

    def __init__(self) -> None:
        from recipes.methods import manifest

        self.expected = json.dumps(manifest.expected_names())
        self.proc = None
        if self.expected not in VerlSeam.passed:
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
        VerlSeam.passed.add(self.expected)


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
