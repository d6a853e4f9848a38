"""recipes/platforms/memory_probe.py: a phase's memory line, and the wrapped verl worker methods
keeping what verl's dispatch reads from them (on a CPU: the GPU figures come from the bare check)."""

from __future__ import annotations

import json
import os
import subprocess
import sys

from recipes.extensions import plugins
from recipes.platforms import memory_probe


def test_a_measured_call_returns_its_value_and_writes_one_line(tmp_path, monkeypatch):
    log = tmp_path / "memory.jsonl"
    monkeypatch.setenv(memory_probe.ENV, str(log))

    def work(a, b=1):
        """adds"""
        return a + b

    wrapped = memory_probe.measured(work, "update")
    assert wrapped(2, b=3) == 5
    assert wrapped.__doc__ == "adds" and wrapped.__wrapped__ is work
    (line,) = [json.loads(x) for x in log.read_text().splitlines()]
    assert line["phase"] == "update" and line["device"] == "cpu" and line["pid"] == os.getpid()
    assert line["before"] == line["peak"] == line["reserved"] == 0  # torch counts no CPU allocations
    assert line["rss"] > 10 * 2**20


def test_nothing_is_patched_unless_the_variable_is_set():
    assert memory_probe.ENV not in os.environ
    assert not set(memory_probe.PATCHES.items()) & set(plugins.AFTER_IMPORT)


def test_the_wrapped_worker_methods_keep_verls_dispatch_attributes(tmp_path):
    code = """
import verl  # loads our plugin
from verl.single_controller.base.decorator import MAGIC_ATTR
from verl.workers.engine_workers import ActorRolloutRefWorker as W
for name in ("compute_ref_log_prob", "compute_log_prob", "update_actor"):
    method = getattr(W, name)
    assert method.__code__.co_filename.endswith("memory_probe.py"), name  # ours, around verl's
    assert getattr(method, MAGIC_ATTR) == getattr(method.__wrapped__, MAGIC_ATTR), name
print("ok")
"""
    env = {**os.environ, memory_probe.ENV: str(tmp_path / "m.jsonl")}
    done = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.strip().splitlines()[-1] == "ok"
