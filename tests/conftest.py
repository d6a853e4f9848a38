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


@pytest.fixture(scope="session", autouse=True)
def no_shared_memory_left_behind():
    """Processes the tests kill (grading workers past their time limit, Ray's and vLLM's processes)
    never unlink their multiprocessing semaphores and shared memory: at the end of the session,
    remove those that appeared during it and that no live process holds."""
    from recipes.cpu_vllm import remove_orphans, shm_files

    before = shm_files()
    yield
    remove_orphans({n for n in shm_files() - before if n.startswith(("psm_", "sem.mp-"))}, wait_s=5.0)
