"""Grader benchmark: one realistic training step graded by verl's built-in math-verify reward
and by ours, side by side, in one run.

What it does
  Builds a seeded step of 256 questions x 8 responses (answers of many kinds; responses boxed
  right, boxed wrong, unboxed "the final answer is", no answer, and long ones), then grades it
  with each contender called the way verl's reward loop calls a reward function (one call per
  response, from 8 threads at once), plus our batch API. Then the same step with 8 hanging
  responses (power towers) mixed in. Each contender runs in a subprocess that grades both steps
  in turn after one start-up (imports done and pools warm, which may take up to 600 s on a busy
  machine); a step still running --cap seconds after it started is killed with its subprocess,
  so a contender that hangs is reported, not waited for.

Command (about 3 minutes on a 2-core machine; prints a markdown table):
  make bench            # = .venv/bin/python scripts/bench/grader_bench.py
  .venv/bin/python scripts/bench/grader_bench.py --questions 64 --cap 60   # quicker

Hardware: CPU only. Writes nothing (stdout only).

Columns
  resp/s        responses graded per second (wall time of the whole step, warm pools)
  p50/p99 ms    per-response latency as the caller sees it (queueing included)
  agree         share of verdicts equal to the label the generator intended (lenient rules)
  finished      responses graded before the cap
"""

from __future__ import annotations

import argparse
import json
import os
import random
import signal
import subprocess
import sys
import tempfile
import time

THREADS = 8
HANGING = "Let me compute. \\boxed{9^{9^{9^9}}}"


# ---------------------------------------------------------------- the step
def _answer_kinds(rng: random.Random):
    """(ground truth, [equivalent forms], [wrong forms]) for one question."""
    a, b = rng.randint(1, 40), rng.randint(2, 41)
    k, m = rng.randint(2, 9), rng.choice([2, 3, 5, 6, 7])
    kind = rng.randrange(9)
    if kind == 0:
        n = rng.randint(1, 5000)
        return str(n), [str(n), f"{n}.0"], [str(n + 1), str(-n)]
    if kind == 1:
        return (
            f"\\frac{{{a}}}{{{b}}}",
            [f"\\frac{{{a}}}{{{b}}}", f"{a}/{b}", f"\\dfrac{{{2 * a}}}{{{2 * b}}}"],
            [f"\\frac{{{a + 1}}}{{{b}}}"],
        )
    if kind == 2:
        return f"{k}\\sqrt{{{m}}}", [f"\\sqrt{{{k * k * m}}}", f"{k}\\sqrt{{{m}}}"], [f"{k + 1}\\sqrt{{{m}}}"]
    if kind == 3:
        return f"({a}, {a + b}]", [f"({a},{a + b}]"], [f"[{a},{a + b}]", f"({a},{a + b})"]
    if kind == 4:
        return f"({a}, {b})", [f"({a},{b})"], [f"({b},{a})"] if a != b else [f"({a},{b + 1})"]
    if kind == 5:
        letter = rng.choice("ABCDE")
        return f"\\text{{({letter})}}", [letter, f"\\text{{({letter})}}"], ["F"]
    if kind == 6:
        val = f"{a}.{rng.randint(1, 9)}"
        return f"['{val}\\n']", [val], [f"{a + 1}.5"]
    if kind == 7:
        return f"x^2+{a}x", [f"x(x+{a})", f"x^2 + {a}x"], [f"x^2+{a + 1}x"]
    return f"{a}^\\circ", [f"{a}", f"{a}^{{\\circ}}"], [f"{a + 90}"]


_FILLER = [
    "First we note that $3 + 4 = 7$ and so the sum is bounded.",
    "Let $x$ be the unknown; then $2x + 5 = 17$ gives $x = 6$.",
    "We consider the cases separately, starting with the smallest one.",
    "By the AM-GM inequality, $\\frac{a+b}{2} \\ge \\sqrt{ab}$.",
    "Substituting back, we verify that the equation holds.",
    "Therefore the area is $\\frac{1}{2} \\cdot 6 \\cdot 8 = 24$.",
]


def _filler(rng: random.Random, chars: int) -> str:
    out, n = [], 0
    while n < chars:
        s = rng.choice(_FILLER)
        out.append(s)
        n += len(s) + 1
    return " ".join(out)


def make_step(questions: int, per_question: int, seed: int = 0, hanging: int = 0):
    """Lists of responses, ground truths and intended labels (True = correct)."""
    rng = random.Random(seed)
    responses, golds, labels = [], [], []
    for _ in range(questions):
        gold, right, wrong = _answer_kinds(rng)
        for _ in range(per_question):
            r = rng.random()
            body = _filler(rng, rng.randint(300, 3000))
            if r < 0.40:
                text, ok = f"{body}\nSo the answer is $\\boxed{{{rng.choice(right)}}}$.", True
            elif r < 0.70:
                text, ok = f"{body}\nThus $\\boxed{{{rng.choice(wrong)}}}$.", False
            elif r < 0.82:
                text, ok = f"{body}\nThe final answer is ${rng.choice(right)}$.", True
            elif r < 0.88:
                text, ok = f"{body} I am not sure how to finish this.", None  # last number of the filler
            else:
                text, ok = f"{_filler(rng, 20_000)}\nHence $\\boxed{{{rng.choice(right)}}}$.", True
            responses.append(text)
            golds.append(gold)
            labels.append(ok)
    for i in range(hanging):
        pos = (i * 2 + 1) * len(responses) // (2 * hanging)
        responses.insert(pos, HANGING)
        golds.insert(pos, "5")
        labels.insert(pos, False)
    return responses, golds, labels


CONTENDERS = [
    ("verl built-in `math_verify.compute_score`, 8 threads", "verl_builtin"),
    ("ours `rewards.compute_score`, 8 threads", "ours_threads"),
    ("ours `rewards.grade_batch`", "ours_batch"),
]


# ---------------------------------------------------------------- one contender (in a child)
def _run_child(contender: str, questions: int, steps: list[int], timeout_s: float, out_path: str) -> None:
    """Grades each step (its number of hanging responses) in turn, writing `out_path.<hanging>`:
    a first record when the step starts, progress, and the final one with the latencies."""
    from concurrent.futures import ThreadPoolExecutor

    if contender == "verl_builtin":
        from verl.utils.reward_score import math_verify as builtin

        def grade_one(resp, gold):
            return float(builtin.compute_score(resp, gold))
    else:
        from rewards.grade import compute_score, get_grader

        get_grader(timeout_s=timeout_s)

        def grade_one(resp, gold):
            return compute_score("math", resp, gold, timeout_s=timeout_s)["acc"]

    # Warm every pool worker first: process start-up is not what we measure.
    with ThreadPoolExecutor(THREADS) as ex:
        list(ex.map(lambda k: grade_one(f"\\boxed{{{k}}}", "1"), range(2 * THREADS)))
    for hanging in steps:
        _grade_step(contender, grade_one, questions, hanging, timeout_s, f"{out_path}.{hanging}")
    os._exit(0)  # the built-in's stuck workers would otherwise block interpreter exit


def _grade_step(contender, grade_one, questions: int, hanging: int, timeout_s: float, path: str) -> None:
    from concurrent.futures import ThreadPoolExecutor

    responses, golds, labels = make_step(questions, 8, hanging=hanging)
    done = 0
    latencies, verdicts = [], [None] * len(responses)
    t0 = time.perf_counter()

    def report(final: bool) -> None:
        record = {"done": done, "total": len(responses), "wall_s": time.perf_counter() - t0}
        if final:
            record.update(latencies=latencies, verdicts=verdicts, labels=labels)
        with open(path + ".tmp", "w") as f:
            json.dump(record, f)
        os.replace(path + ".tmp", path)

    report(final=False)  # started: the parent's --cap for this step counts from here
    if contender == "ours_batch":
        from rewards.grade import get_grader

        results = get_grader(timeout_s=timeout_s).grade_batch(responses, golds)
        latencies = [r["latency_s"] for r in results]
        verdicts = [r["acc"] for r in results]
        done = len(results)
    else:

        def timed(i):
            s = time.perf_counter()
            v = grade_one(responses[i], golds[i])
            return i, v, time.perf_counter() - s

        with ThreadPoolExecutor(THREADS) as ex:
            for i, v, lat in ex.map(timed, range(len(responses))):
                verdicts[i] = v
                latencies.append(lat)
                done += 1
                if done % 64 == 0:
                    report(final=False)
    report(final=True)


STARTUP_S = 600.0  # a contender's imports and warm-up, before its first step's --cap starts


def _read(path: str) -> dict | None:
    try:
        with open(path) as f:
            return json.load(f)
    except (OSError, ValueError):
        return None


def run_contender(contender: str, questions: int, steps: list[int], cap: float, timeout_s: float) -> dict:
    """{hanging: record} for each step. One child grades the steps in turn (one start-up and
    warm-up for all); a step that runs past --cap is killed with its child, and the steps left
    get a fresh child."""
    results: dict[int, dict] = {}
    while len(results) < len(steps):
        todo = [h for h in steps if h not in results]
        with tempfile.TemporaryDirectory() as tmp:
            out = os.path.join(tmp, "result")
            cmd = [
                sys.executable,
                os.path.abspath(__file__),
                "--child",
                contender,
                "--questions",
                str(questions),
            ]
            cmd += ["--steps", ",".join(map(str, todo)), "--timeout-s", str(timeout_s), "--out", out]
            # verl's built-in spawns 4 worker processes that each import verl, and `import verl`
            # loads every `verl.plugins` entry point, ours too (~8 s per process on 2 cores): plain
            # verl has none, and start-up is not what this benchmark measures
            env = {**os.environ, "VERL_USE_EXTERNAL_PLUGINS": "none"}
            proc = subprocess.Popen(
                cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True, env=env
            )
            try:
                for i, hanging in enumerate(todo):
                    path = f"{out}.{hanging}"
                    # the cap counts from the step's start (for the first, imports done and pools
                    # warm: on a busy machine start-up alone can take a minute)
                    started_by = time.monotonic() + (STARTUP_S if i == 0 else cap)
                    while _read(path) is None and proc.poll() is None and time.monotonic() < started_by:
                        time.sleep(0.2)
                    deadline = time.monotonic() + cap
                    while not ((r := _read(path)) and "latencies" in r) and proc.poll() is None:
                        if time.monotonic() > deadline:
                            break
                        time.sleep(0.2)
                    r = _read(path) or {"done": 0, "total": None, "wall_s": cap}
                    r["capped"] = "latencies" not in r
                    results[hanging] = r
                    if r["capped"]:
                        break  # the child is stuck in this step: the rest get a fresh one
            finally:
                try:
                    os.killpg(proc.pid, signal.SIGKILL)  # the child's pool processes, stuck or not
                except ProcessLookupError:
                    pass
                proc.wait()
    return results


def _fmt_row(name: str, r: dict, cap: float) -> str:
    lat = sorted(r.get("latencies") or [])  # a capped contender wrote none
    if r["capped"] or not lat:
        return f"| {name} | > {cap:.0f} | - | - | - | {r['done']}/{r['total'] or '?'} (killed at the {cap:.0f} s cap) |"
    p50 = lat[len(lat) // 2] * 1e3
    p99 = lat[min(len(lat) - 1, int(len(lat) * 0.99))] * 1e3
    labelled = [(v, lab) for v, lab in zip(r["verdicts"], r["labels"], strict=True) if lab is not None]
    agree = sum((v == 1.0) == lab for v, lab in labelled) / max(1, len(labelled))
    rate = r["done"] / r["wall_s"]
    return f"| {name} | {r['wall_s']:.1f} | {rate:.0f} | {p50:.1f} / {p99:.0f} | {agree:.1%} | {r['done']}/{r['total']} |"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--questions", type=int, default=256)
    ap.add_argument("--cap", type=float, default=150.0, help="kill a contender's run after this many seconds")
    ap.add_argument("--timeout-s", type=float, default=5.0, help="our grader's per-task time limit")
    ap.add_argument("--child", help=argparse.SUPPRESS)
    ap.add_argument("--steps", default="0", help=argparse.SUPPRESS)
    ap.add_argument("--out", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.child:
        _run_child(
            args.child, args.questions, [int(h) for h in args.steps.split(",")], args.timeout_s, args.out
        )
        return

    workers = int(os.environ.get("RECIPES_GRADER_WORKERS", min(8, os.cpu_count() or 1)))
    print(
        f"# Grader benchmark: {args.questions} questions x 8 responses, {os.cpu_count()} cores, "
        f"our pool {workers} workers, our time limit {args.timeout_s:g} s\n"
    )
    steps = (0, 8)
    rows = {}
    for _, key in CONTENDERS:
        for hanging, r in run_contender(key, args.questions, list(steps), args.cap, args.timeout_s).items():
            rows[(key, hanging)] = r
    for hanging in steps:
        title = "clean step" if not hanging else f"same step + {hanging} hanging responses"
        print(f"## {title}\n")
        print("| grader | wall s | resp/s | p50 / p99 ms | agree | finished |")
        print("|---|---|---|---|---|---|")
        for name, key in CONTENDERS:
            print(_fmt_row(name, rows[(key, hanging)], args.cap), flush=True)
        print()
    base, ours = rows[("verl_builtin", 0)], rows[("ours_threads", 0)]
    if not base["capped"] and not ours["capped"]:
        speedup = (ours["done"] / ours["wall_s"]) / (base["done"] / base["wall_s"])
        print(f"Throughput, ours (same calling convention) / verl built-in, clean step: {speedup:.2f}x")
    bound = args.timeout_s * -(-8 // workers) + 5
    hostile = rows[("ours_batch", 8)]
    print(
        f"Hostile step, ours_batch: {hostile['wall_s']:.1f} s (target <= time limit x ceil(8/workers) + 5 = {bound:.0f} s)"
    )


if __name__ == "__main__":
    main()
