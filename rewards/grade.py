"""A math grader that never hangs and never crashes the trainer.

`compute_score` has verl's reward-function signature; `grade_batch` grades a whole training step
in parallel; `Grader.submit` returns a future (the verl reward manager in
`recipes.extensions.reward_manager` awaits it). All three share one process-wide `Grader`.

Every math-verify call runs in a worker of a pebble `ProcessPool` (forked from a forkserver with
math-verify preloaded): a call over `timeout_s` has its worker killed and scores 0 with
`status="timeout"`; a worker that dies otherwise is retried once, then scores 0 with
`status="error"`. Workers die with the grading process, even when it is SIGKILLed. A script that
grades needs an `if __name__ == "__main__":` guard (workers import the main module).

Result of one sample, fixed keys (so verl can stack them into arrays): `score` (= `acc`; the
training reward is rewards/training.py's), `acc` (1.0 if the extracted answer is equivalent to
the ground truth, else 0.0), `pred` (the extracted answer, "" if none), `timed_out`, `status` (one of
`STATUSES`: ok, no_answer, box_too_long, timeout, error, bad_ground_truth, too_deep) and
`latency_s`. docs/grader.md has the extraction, the equivalence and the work per step.

Arguments: what a sample holds (the response, the ground truth: any type, size or depth) never
raises; it is graded or gets a status saying why not. A bad setting (`num_workers`, `timeout_s`,
`mode`) is a programmer's or a config's error, not a sample's: one ValueError naming it, raised
before anything is graded (the training config's are checked before Ray starts,
rewards/training.py).
"""

from __future__ import annotations

import logging
import math
import multiprocessing
import multiprocessing.util
import numbers
import os
import threading
import time
from collections import OrderedDict
from collections.abc import Sequence
from concurrent.futures import Future
from concurrent.futures import TimeoutError as FutureTimeout
from typing import Any

import pebble

from rewards import _mathverify
from rewards.extract import (
    MAX_NESTING,
    MODES,
    Mode,
    check_ground_truth,
    clean_answer,
    extract_answer,
    nesting_depth,
    numeric_value,
    to_text,
)

DEFAULT_TIMEOUT_S = 5.0
# Every grading task has a limit, and no setting can remove it: at most this many seconds.
MAX_TIMEOUT_S = 300.0
# Grading processes per grader: each is a process with math-verify and sympy (about 60 MB
# resident), and a hung task burns a core, so more than this is a mistake, not a setting.
MAX_WORKERS = 256
ENV_WORKERS = "RECIPES_GRADER_WORKERS"
ENV_TIMEOUT = "RECIPES_GRADER_TIMEOUT_S"
STATUSES = ("ok", "no_answer", "box_too_long", "timeout", "error", "bad_ground_truth", "too_deep")
_GOLD_CACHE_SIZE = 8192
logger = logging.getLogger(__name__)
_warned: set[str] = set()


def _warn_bad_ground_truth(problem: str) -> None:
    """Log each unusable ground truth once: it scores 0 for every response, which a run must see.
    `problem` is check_ground_truth's message (it shows at most the start of the ground truth: a
    repr of any ground truth could raise, recurse or run for seconds)."""
    if problem not in _warned and len(_warned) < 1000:
        _warned.add(problem)
        logger.warning("%s: its responses score 0 (status=bad_ground_truth)", problem)


def check_timeout_s(value: Any, name: str = "timeout_s") -> float:
    """A grading time limit: a finite number of seconds in (0, MAX_TIMEOUT_S]. ValueError naming
    `name` otherwise (NaN and inf would switch the limit off)."""
    try:
        seconds = float(value)
    except (TypeError, ValueError):
        seconds = math.nan
    if isinstance(value, bool) or not (math.isfinite(seconds) and 0 < seconds <= MAX_TIMEOUT_S):
        raise ValueError(f"{name}={value!r} must be a number of seconds in (0, {MAX_TIMEOUT_S:g}]")
    return seconds


def check_num_workers(value: Any, name: str = "num_workers") -> int:
    """A worker count: an integer from 1 to MAX_WORKERS. ValueError naming `name` otherwise (-1 left
    the pool without workers, its tasks waiting forever)."""
    if isinstance(value, bool) or not isinstance(value, numbers.Integral) or not 1 <= value <= MAX_WORKERS:
        raise ValueError(f"{name}={value!r} must be an integer from 1 to {MAX_WORKERS}")
    return int(value)


def check_mode(value: Any) -> Mode:
    """An extraction mode, one of MODES; ValueError naming it otherwise."""
    if not isinstance(value, str) or value not in MODES:
        raise ValueError(f"mode={value!r} must be one of {', '.join(MODES)}")
    return value


def default_num_workers() -> int:
    """`$RECIPES_GRADER_WORKERS` (1 to MAX_WORKERS), else the number of cores, at least 4 and at
    most 8 (a Ray node can have 96 cores and several reward workers, each with its own pool).
    At least 4 because a response that hangs math-verify holds its worker for the whole time
    limit whatever the cores: with 2 workers, a step with 8 such responses waits 4 time limits,
    with 4 it waits 2 (docs/benchmarks.md#grader-speed)."""
    env = os.environ.get(ENV_WORKERS)
    if env:
        if not (env.strip().isdigit() and 1 <= int(env) <= MAX_WORKERS):
            raise ValueError(f"${ENV_WORKERS}={env!r} must be an integer from 1 to {MAX_WORKERS}")
        return int(env)
    return max(4, min(8, os.cpu_count() or 1))


def default_timeout_s() -> float:
    """`$RECIPES_GRADER_TIMEOUT_S` (checked: check_timeout_s), else DEFAULT_TIMEOUT_S."""
    env = os.environ.get(ENV_TIMEOUT)
    return check_timeout_s(env, f"${ENV_TIMEOUT}") if env else DEFAULT_TIMEOUT_S


def _stop_pool(pool: pebble.ProcessPool, owner_pid: int) -> None:
    if os.getpid() == owner_pid:  # a forked child must not stop its parent's pool
        pool.stop()
        pool.join(timeout=10)


def _squeeze(answer: str) -> str:
    """`answer` without whitespace, for a string-equality check. Spaces carry no meaning in LaTeX
    math; inside `\\text{}` they do, so such answers are left as they are."""
    return answer if "\\text" in answer else "".join(answer.split())


def _numeric_verdict(pred: str, golds: tuple[str, ...]) -> bool | None:
    """Exact verdict when the answer and every accepted answer are plain numbers; None when
    math-verify must decide (some side is an expression, a set, text, ...)."""
    value = numeric_value(pred)
    if value is None:
        return None
    gold_values = [numeric_value(g) for g in golds]
    if any(g == value for g in gold_values):
        return True
    return False if all(g is not None for g in gold_values) else None


class Grader:
    """Owns the worker pool, the per-question cache of parsed ground truths, and counters."""

    def __init__(self, num_workers: int | None = None, timeout_s: float | None = None):
        self.num_workers = (
            check_num_workers(num_workers, "grader num_workers")
            if num_workers is not None
            else default_num_workers()
        )
        self.timeout_s = (
            check_timeout_s(timeout_s, "grader timeout_s") if timeout_s is not None else default_timeout_s()
        )
        self._lock = threading.Lock()
        self._pool: pebble.ProcessPool | None = None
        self._pool_pid: int | None = None
        self._finalizer: multiprocessing.util.Finalize | None = None
        self._gold: OrderedDict[tuple[str, ...], Future] = OrderedDict()
        self.reset_stats()

    # ------------------------------------------------------------------ pool
    def _get_pool(self) -> pebble.ProcessPool:
        with self._lock:
            stale = self._pool is None or self._pool_pid != os.getpid() or not self._pool.active
            if stale:
                self._stop_locked()
                ctx = multiprocessing.get_context("forkserver")
                ctx.set_forkserver_preload(["rewards._mathverify", "rewards._orphan_guard"])
                self._pool = pebble.ProcessPool(
                    max_workers=self.num_workers, context=ctx, initializer=_mathverify.worker_init
                )
                self._pool_pid = os.getpid()
                # Stop the pool when the grader is collected or the process exits. Not
                # `atexit`: a multiprocessing child (a user's process pool) never runs it, and
                # multiprocessing's own exit hook would wait for our workers forever; a
                # Finalize with a priority runs before that wait, in parents and children.
                self._finalizer = multiprocessing.util.Finalize(
                    self, _stop_pool, args=(self._pool, self._pool_pid), exitpriority=100
                )
            return self._pool

    def worker_pids(self) -> list[int]:
        """PIDs of the live worker processes (for tests and diagnostics)."""
        pool = self._get_pool()
        return [w.pid for w in pool._pool_manager.worker_manager.workers.values() if w.is_alive()]

    def close(self) -> None:
        """Stop the worker processes. The grader restarts them if used again."""
        with self._lock:
            self._stop_locked()

    def _stop_locked(self) -> None:
        if self._finalizer is not None:
            self._finalizer()  # runs `_stop_pool` once
        self._finalizer = None
        self._pool = None
        self._gold.clear()  # its futures belonged to the stopped pool

    def _schedule(self, fn, args: tuple, retries: int = 1) -> Future:
        """Run `fn(*args)` in the pool; retry once if the worker died of something other than
        the time limit. The returned future never stays pending: pebble kills at `timeout_s`."""
        out: Future = Future()

        def attempt(left: int) -> None:
            try:
                task = self._get_pool().schedule(fn, args=args, timeout=self.timeout_s)
            except Exception as exc:  # pool closed under us: report, do not raise in a callback
                out.set_exception(exc)
                return

            def done(task: Future) -> None:
                try:
                    out.set_result(task.result())
                except pebble.ProcessExpired as exc:
                    if left > 0:
                        attempt(left - 1)
                    else:
                        out.set_exception(exc)
                except BaseException as exc:
                    out.set_exception(exc)

            task.add_done_callback(done)

        attempt(retries)
        return out

    def _gold_future(self, golds: tuple[str, ...]) -> Future:
        with self._lock:
            fut = self._gold.get(golds)
            if fut is not None:
                self._gold.move_to_end(golds)
                self.gold_cache_hits += 1
                return fut
        fut = self._schedule(_mathverify.parse_gold, (golds,))
        with self._lock:
            fut = self._gold.setdefault(golds, fut)
            self.gold_parses += 1
            while len(self._gold) > _GOLD_CACHE_SIZE:
                self._gold.popitem(last=False)
        return fut

    # ------------------------------------------------------------------ grading
    def submit(self, solution_str: Any, ground_truth: Any, mode: Mode = "lenient") -> Future:
        """Grade one response; the future's result is the dict described in the module doc."""
        t0 = time.perf_counter()
        mode = check_mode(mode)
        text = to_text(solution_str)
        out: Future = Future()
        try:
            golds, problem = check_ground_truth(ground_truth), ""
        except ValueError as exc:
            golds, problem = (), str(exc)
        extraction = extract_answer(text, mode)
        pred = clean_answer(extraction.answer) if extraction.answer else ""

        def finish(acc: bool, status: str) -> None:
            result = {
                "score": float(acc),
                "acc": float(acc),
                "pred": pred,
                "timed_out": status == "timeout",
                "status": status,
                "latency_s": time.perf_counter() - t0,
            }
            out.set_result(result)

        if problem:
            _warn_bad_ground_truth(problem)
            finish(False, "bad_ground_truth")
        elif extraction.method == "box_too_long":  # never its tail, never an earlier box
            finish(False, "box_too_long")
        elif not pred:
            finish(False, "no_answer")
        elif _squeeze(pred) in {_squeeze(g) for g in golds}:
            finish(True, "ok")
        elif (verdict := _numeric_verdict(pred, golds)) is not None:
            finish(verdict, "ok")
        elif nesting_depth(pred) > MAX_NESTING:
            finish(False, "too_deep")
        else:

            def on_verified(task: Future) -> None:
                try:
                    finish(bool(task.result()), "ok")
                except FutureTimeout:
                    finish(False, "timeout")
                except BaseException:
                    finish(False, "error")

            def on_gold(gold_task: Future) -> None:
                try:
                    blob, parsed_any = gold_task.result()
                except FutureTimeout:
                    parsed_any = False  # the ground truth itself hangs the parser
                except BaseException:
                    finish(False, "error")
                    return
                if not parsed_any:
                    _warn_bad_ground_truth(f"ground truth {golds!r:.200} does not parse (math-verify)")
                    finish(False, "bad_ground_truth")
                    return
                self._schedule(_mathverify.verify_answer, (blob, pred)).add_done_callback(on_verified)

            self._gold_future(golds).add_done_callback(on_gold)
        return out

    def grade(self, solution_str: Any, ground_truth: Any, **kwargs: Any) -> dict:
        return self.submit(solution_str, ground_truth, **kwargs).result()

    def grade_batch(
        self,
        solutions: Sequence[Any],
        ground_truths: Sequence[Any],
        mode: Mode = "lenient",
    ) -> list[dict]:
        """Grade many responses at once, in parallel over the pool, in input order."""
        if isinstance(solutions, str | bytes) or isinstance(ground_truths, str | bytes):
            raise ValueError(
                "grade_batch takes a sequence of solutions and one of ground truths, not a string"
            )
        if len(solutions) != len(ground_truths):
            raise ValueError(f"{len(solutions)} solutions but {len(ground_truths)} ground truths")
        futures = [self.submit(s, g, mode=mode) for s, g in zip(solutions, ground_truths, strict=True)]
        return [f.result() for f in futures]

    # ------------------------------------------------------------------ counters
    def reset_stats(self) -> None:
        """Ground-truth parses and parse-cache hits since the last reset (the training step's
        grader metrics come from the results themselves: recipes.extensions.trainer)."""
        self.gold_parses = self.gold_cache_hits = 0


_default: Grader | None = None
_default_lock = threading.Lock()


def get_grader(num_workers: int | None = None, timeout_s: float | None = None) -> Grader:
    """The process-wide grader; rebuilt if asked for a different worker count or time limit."""
    global _default
    with _default_lock:
        want_workers = check_num_workers(num_workers) if num_workers is not None else default_num_workers()
        want_timeout = check_timeout_s(timeout_s) if timeout_s is not None else default_timeout_s()
        if _default is None or (_default.num_workers, _default.timeout_s) != (want_workers, want_timeout):
            if _default is not None:
                _default.close()
            _default = Grader(want_workers, want_timeout)
        return _default


def compute_score(
    data_source: str | None = None,
    solution_str: Any = None,
    ground_truth: Any = None,
    extra_info: dict | None = None,
    *,
    mode: Mode = "lenient",
    timeout_s: float | None = None,
    num_workers: int | None = None,
    **kwargs: Any,
) -> dict:
    """verl's reward-function entry point (`reward.custom_reward_function.path=pkg://rewards`,
    `name=compute_score`). Safe from the main thread, any thread, and a Ray worker.

    mode           `lenient` (training; boxed, then "the answer is", then last number) or
                   `boxed` (evaluation; only a boxed answer counts).
    timeout_s      time limit per math-verify task, in (0, 300] (default 5 s or
                   $RECIPES_GRADER_TIMEOUT_S).
    num_workers    grading processes, 1 to 256 (default $RECIPES_GRADER_WORKERS, else the cores,
                   at least 4 and at most 8).
    A bad setting raises ValueError before anything is graded; a bad sample gets a status.
    `extra_info` and other verl keyword arguments (reward_router_address, ...) are accepted and
    ignored: the score is correctness alone (the training reward is rewards/training.py's).
    """
    return get_grader(num_workers, timeout_s).grade(solution_str, ground_truth, mode=mode)


def grade_batch(
    solutions: Sequence[Any],
    ground_truths: Sequence[Any],
    *,
    mode: Mode = "lenient",
    timeout_s: float | None = None,
    num_workers: int | None = None,
) -> list[dict]:
    """Grade a whole batch in parallel with the process-wide grader."""
    return get_grader(num_workers, timeout_s).grade_batch(solutions, ground_truths, mode=mode)
