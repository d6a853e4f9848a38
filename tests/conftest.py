"""Shared fixtures. Tests run with `--import-mode=importlib` (see pyproject): verl's wheel ships
top-level `tests`/`scripts` packages, so nothing here is imported under those names."""

import pytest

from rewards.grader import Grader


@pytest.fixture(scope="module")
def grader():
    """A 2-worker grader with a 2 s limit: short enough to keep the suite fast, long enough that
    no honest sample on a busy 2-core CI machine comes near it."""
    g = Grader(num_workers=2, timeout_s=2.0)
    yield g
    g.close()
