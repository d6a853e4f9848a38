"""One question round after round (ask, parse, check, verify), every question concurrently, and
the summary of a run (docs/rephrase.md)."""

from __future__ import annotations

import asyncio
import sys
from collections import Counter
from collections.abc import Mapping, Sequence

from recipes.tools.rephrase.cache import CacheWriter
from recipes.tools.rephrase.check import REASONS, UNPARSED, WRONG_ANSWER, check_rephrasing
from recipes.tools.rephrase.client import Client
from recipes.tools.rephrase.prompt import INSTRUCTION_VERSION, parse_rephrasings, user_message

SHOW_ROWS = 10  # how many filled row indices the report prints


# ----------------------------------------------------------------------------------------------
# One question, the whole run


def _new_record(key: str, question: str, model: str, n: int) -> dict:
    return {
        "key": key,
        "question": question,
        "model": model,
        "n": n,
        "instruction_version": INSTRUCTION_VERSION,
        "rephrasings": [],
        "complete": False,
        "rounds": 0,
        "requested": 0,
        "rejected": dict.fromkeys((*REASONS, WRONG_ANSWER, UNPARSED), 0),
        "http_requests": 0,
        "retries": 0,
        "verified": [],  # per candidate solved: {"text", "correct", "of"}
        "verify_requests": 0,  # of http_requests, those that solved candidates
        "verify_tokens": 0,  # their prompt + completion tokens, as the endpoint reports them
    }


async def verify(client: Client, grader, candidate: str, answer: str, k: int) -> tuple[int, int, int, int]:
    """(correct, HTTP requests, retries, tokens): how many of `k` solutions of `candidate` the
    project's grader (lenient rule) finds equal to `answer`."""
    texts, reqs, retries, tokens = await client.solve(candidate, k)
    results = await asyncio.gather(*(asyncio.wrap_future(grader.submit(t, answer)) for t in texts))
    return sum(r["acc"] > 0 for r in results), reqs, retries, tokens


async def rephrase_question(
    client: Client,
    key: str,
    question: str,
    n: int,
    max_rounds: int,
    answer: str = "",
    k: int = 0,
    grader=None,
) -> dict:
    """Ask for the rephrasings of one question, round after round; returns its cache record.
    With `k` (> 0), a candidate that passes the text checks is kept only when more than half of
    `k` solutions of it by the endpoint are graded equal to `answer` (WRONG_ANSWER otherwise)."""
    rec = _new_record(key, question, client.model, n)
    accepted: list[str] = rec["rephrasings"]
    for _ in range(max_rounds):
        k_round = n - len(accepted)
        if k_round <= 0:
            break
        text, reqs, retries = await client.complete(user_message(question, k_round, accepted))
        rec["rounds"] += 1
        rec["requested"] += k_round
        rec["http_requests"] += reqs
        rec["retries"] += retries
        blocks = parse_rephrasings(text)[:k_round]
        rec["rejected"][UNPARSED] += k_round - len(blocks)
        passed = []
        for cand in blocks:
            reason = check_rephrasing(question, cand, [*accepted, *passed])
            if reason is None:
                passed.append(cand.strip())
            else:
                rec["rejected"][reason] += 1
        if k and passed:
            checks = await asyncio.gather(*(verify(client, grader, c, answer, k) for c in passed))
            kept = []
            for cand, (correct, reqs, retries, tokens) in zip(passed, checks, strict=True):
                rec["http_requests"] += reqs
                rec["retries"] += retries
                rec["verify_requests"] += reqs
                rec["verify_tokens"] += tokens
                rec["verified"].append({"text": cand, "correct": correct, "of": k})
                if 2 * correct > k:
                    kept.append(cand)
                else:
                    rec["rejected"][WRONG_ANSWER] += 1
            passed = kept
        accepted.extend(passed)
    rec["complete"] = len(accepted) >= n
    return rec


async def run_requests(
    client: Client,
    todo: Mapping[str, tuple[str, str]],
    n: int,
    max_rounds: int,
    cache: CacheWriter,
    done: dict,
    verify_k: int = 0,
) -> None:
    """Rephrase every question of `todo` (key -> (question, ground truth)), appending each
    finished one to the cache and to `done`; with `verify_k`, verify each candidate (rephrase_question).
    The first RunError cancels everything still in flight and propagates."""
    from tqdm import tqdm

    grader = None
    if verify_k:
        from rewards.grade import Grader

        grader = Grader()
    async with client:
        await client.probe()
        with tqdm(total=len(todo), desc="rephrasing", unit="question", file=sys.stderr) as bar:

            async def one(key: str, question: str, answer: str) -> None:
                rec = await rephrase_question(client, key, question, n, max_rounds, answer, verify_k, grader)
                cache.append(rec)
                done[key] = rec
                bar.update(1)

            tasks = [asyncio.create_task(one(k, q, a)) for k, (q, a) in todo.items()]
            watchdog = asyncio.create_task(client.watchdog())
            try:
                for fut in asyncio.as_completed([*tasks, watchdog]):
                    await fut
                    if all(t.done() for t in tasks):
                        break
            finally:
                for t in [*tasks, watchdog]:
                    t.cancel()
                await asyncio.gather(*tasks, watchdog, return_exceptions=True)
                if grader is not None:
                    grader.close()


# ----------------------------------------------------------------------------------------------
# Summary


def summarize(rows: Sequence[Mapping], records: Mapping[str, dict], keys: Sequence[str], n: int) -> dict:
    """Counts over the questions of `rows` (keys[i] is row i's cache key)."""
    uniq = list(dict.fromkeys(keys))
    recs = [records[k] for k in uniq]
    rejected = Counter()
    for r in recs:
        rejected.update(r.get("rejected", {}))
    requested = sum(r.get("requested", 0) for r in recs)
    accepted = sum(min(len(r["rephrasings"]), n) for r in recs)
    filled_rows = [i for i, k in enumerate(keys) if len(records[k]["rephrasings"]) < n]
    return {
        "rows": len(rows),
        "questions": len(uniq),
        "requested": requested,
        "accepted": accepted,
        "acceptance_rate": round(accepted / requested, 4) if requested else None,
        "rejected": {r: rejected.get(r, 0) for r in (*REASONS, WRONG_ANSWER, UNPARSED)},
        "verified": sum(len(r.get("verified", [])) for r in recs),
        "verify_requests": sum(r.get("verify_requests", 0) for r in recs),
        "verify_tokens": sum(r.get("verify_tokens", 0) for r in recs),
        "filled_questions": sum(len(r["rephrasings"]) < n for r in recs),
        "filled_rows": filled_rows,
        "http_requests": sum(r.get("http_requests", 0) for r in recs),
        "retries": sum(r.get("retries", 0) for r in recs),
    }


def format_summary(s: Mapping, n: int, max_rounds: int, this_run: Mapping) -> str:
    rate = "n/a" if s["acceptance_rate"] is None else f"{100 * s['acceptance_rate']:.1f}%"
    lines = [
        f"questions: {s['questions']} ({s['rows']} rows)",
        f"rephrasings: requested {s['requested']}, accepted {s['accepted']} ({rate})",
        "rejected: " + ", ".join(f"{r} {c}" for r, c in s["rejected"].items()),
    ]
    rows = s["filled_rows"]
    if rows:
        more = f" and {len(rows) - SHOW_ROWS} more" if len(rows) > SHOW_ROWS else ""
        lines.append(
            f"filled: {s['filled_questions']} question(s), {len(rows)} row(s) had fewer than {n} valid "
            f"rephrasings after {max_rounds} round(s), filled by cycling their accepted ones (or the "
            f"original): rows {rows[:SHOW_ROWS]}{more}"
        )
    else:
        lines.append("filled: 0 questions")
    if s["verified"]:
        lines.append(
            f"verification: {s['verified']} candidate(s) solved by the endpoint, {s['rejected'][WRONG_ANSWER]} "
            f"rejected as {WRONG_ANSWER}; cost {s['verify_requests']} requests, {s['verify_tokens']} tokens"
        )
    lines.append(f"requests: {s['http_requests']}, retries: {s['retries']}")
    lines.append(
        f"this run: asked {this_run['asked']} question(s) ({this_run['cached']} from the cache), "
        f"{this_run['requests']} requests, {this_run['retries']} retries"
    )
    return "\n".join(lines)
