"""A script of this repository as a module, for the tests of its functions. Scripts are run as
files, not imported as a package; pyproject puts tests/ on pytest's sys.path for this module."""

import importlib.util
import sys
from pathlib import Path
from types import ModuleType


def load_script(path: Path, name: str | None = None) -> ModuleType:
    """The file at `path` executed as module `name` (the file's stem unless given), registered in
    sys.modules under that name so that its dataclasses resolve their own module."""
    name = name or Path(path).stem
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module
