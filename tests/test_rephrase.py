"""recipes.tools.rephrase: the validator and parser, and whole runs against a real OpenAI-compatible
HTTP server on loopback (stdlib ThreadingHTTPServer) with scripted answers per question: good,
bad (one per rejection reason), garbage, slow, 5xx/429 then success, 401. The openai SDK is not mocked."""

import json
import signal
import subprocess
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from recipes.tools import rephrase as rp
from recipes.tools.data import make_rows, read_meta, write_rows

REPO = Path(__file__).resolve().parents[1]
SECRET = "sk-test-DO-NOT-LEAK-9f3a1c77e2"
KEY_ENV = "REPHRASE_TEST_KEY"

QUESTIONS = [
    "A train travels 120 miles in 2.5 hours. At this rate, how many miles does it travel in 4 hours?",
    "If $x^2 + 3x = 10$ and $x > 0$, what is the value of $x$?",
    "What is the sum of all positive divisors of 1,000 that are multiples of 5?",
    r"Compute $\frac{7}{8} \cdot \left(\frac{2}{3}\right)^{-1}$ and express it as a common fraction.",
    "A circle of radius $r = 6$ is inscribed in a square. What is the area of the square, in square units?",
    r"Find the number of ordered pairs $(a, b)$ of integers with $1 \le a, b \le 20$ and $a + b = 21$.",
]
PREFIXES = ["Restated:", "Put differently:", "In other words:", "Consider this:", "Here it is again:"]


def good(question: str, i: int) -> str:
    """A rephrasing that passes every rule (distinct for each i)."""
    return f"{PREFIXES[i % len(PREFIXES)]} {question}"


def tags(*texts: str) -> str:
    return "\n".join(f"<rephrasing>{t}</rephrasing>" for t in texts)


# ----------------------------------------------------------------------------------------------
# A scripted OpenAI-compatible server


class FakeServer:
    """Answers POST /v1/chat/completions. `script[question]` is a list of actions consumed one per
    request for that question; once it is empty, the answer is `k` good rephrasings (k read from the
    request; good(q, i) is never sent twice for one question). Actions: ("text", content), ("status", code, headers, body), ("sleep", seconds),
    ("raw", body). `fail_after`: once that many requests were answered 200, every request gets 500."""

    def __init__(self):
        self.script: dict[str, list] = {}
        self.log: list[dict] = []
        self.good_count: dict[str, int] = {}
        self.fail_after: int | None = None
        self.ok = 0
        self.probes = 0
        self.solves: list[dict] = []
        self.solver = None  # problem -> answer; None: the QUESTIONS index
        self.questions = list(QUESTIONS)  # what answer() recognizes in a rephrasing request
        self.lock = threading.Lock()
        fake = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args):
                pass

            def do_GET(self):  # the client's liveness probe: GET /v1/models
                fake.probes += 1
                models = {"object": "list", "data": [{"id": "test-model", "object": "model"}]}
                fake.send(self, 200, {}, json.dumps(models).encode())

            def do_POST(self):
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                try:
                    fake.answer(self, body)
                except (BrokenPipeError, ConnectionResetError):
                    pass  # the client gave up (timeout)

        class Server(ThreadingHTTPServer):
            daemon_threads = True

            def handle_error(self, request, client_address):
                pass

        self.httpd = Server(("127.0.0.1", 0), Handler)
        self.base_url = f"http://127.0.0.1:{self.httpd.server_address[1]}/v1"
        self.thread = threading.Thread(target=self.httpd.serve_forever, args=(0.05,), daemon=True)
        self.thread.start()

    def close(self):
        self.httpd.shutdown()
        self.httpd.server_close()

    def requests_for(self, question):
        return [e for e in self.log if e["question"] == question]

    def answer(self, h, body):
        content = body["messages"][-1]["content"]
        if content.startswith(rp.SOLVE_PROMPT.split("{", 1)[0]):
            return self.solve(h, body, content.split("Problem: ", 1)[1])
        question = next((q for q in self.questions if f"Question: {q}\n" in content), None)
        k = int(content.rsplit("Write ", 1)[1].split(" ", 1)[0])
        with self.lock:
            entry = {
                "path": h.path,
                "question": question,
                "k": k,
                "content": content,
                "body": body,
                "auth": h.headers.get("Authorization"),
                "t": time.monotonic(),
            }
            self.log.append(entry)
            steps = self.script.get(question) or []
            action = steps.pop(0) if steps else None
            failing = self.fail_after is not None and self.ok >= self.fail_after
            n0 = self.good_count.get(question, 0)  # good(q, i) for i < n0 may have been sent already
            self.good_count[question] = n0 + k
            if action is None and not failing:
                action = ("text", tags(*(good(question, n0 + i) for i in range(k))))
        if failing:
            action = ("status", 500, {}, "down")
        entry["action"] = action[0] if action[0] != "status" else action[1]
        if h.path != "/v1/chat/completions":
            return self.send(h, 404, {}, b"not found")
        if action[0] == "status":
            _, code, headers, text = action
            return self.send(h, code, headers, json.dumps({"error": {"message": text}}).encode())
        if action[0] == "sleep":
            time.sleep(action[1])
            action = ("text", tags(*(good(question, 10 + i) for i in range(k))))
        if action[0] == "raw":
            return self.send(h, 200, {}, action[1])
        with self.lock:
            self.ok += 1
        completion = {
            "id": "x",
            "object": "chat.completion",
            "model": body["model"],
            "choices": [{"index": 0, "message": {"role": "assistant", "content": action[1]}}],
        }
        self.send(h, 200, {}, json.dumps(completion).encode())

    def solve(self, h, body, problem):
        """The endpoint as a solver (`--verify K`): `body["n"]` solutions, each ending in a boxed
        answer: `solver(problem)` when set, else the index of the QUESTIONS entry the problem
        contains (the test rows' ground truth)."""
        with self.lock:
            self.solves.append(
                {"problem": problem, "n": body.get("n", 1), "max_tokens": body.get("max_tokens")}
            )
        n = body.get("n", 1)
        if self.solver is not None:
            answer = self.solver(problem)
        else:
            answer = next((str(i) for i, q in enumerate(QUESTIONS) if q in problem), "none")
        answers = answer if isinstance(answer, list) else [answer] * n  # a list: one per solution
        completion = {
            "id": "s",
            "object": "chat.completion",
            "model": body["model"],
            "choices": [
                {"index": i, "message": {"role": "assistant", "content": f"Working... so \\boxed{{{a}}}."}}
                for i, a in enumerate(answers)
            ],
            "usage": {"prompt_tokens": 50, "completion_tokens": 10 * n, "total_tokens": 50 + 10 * n},
        }
        self.send(h, 200, {}, json.dumps(completion).encode())

    @staticmethod
    def send(h, code, headers, payload):
        h.send_response(code)
        h.send_header("Content-Type", "application/json")
        h.send_header("Content-Length", str(len(payload)))
        for k, v in headers.items():
            h.send_header(k, v)
        h.end_headers()
        h.wfile.write(payload)


@pytest.fixture(autouse=True)
def _no_proxy(monkeypatch):
    """httpx honours *_PROXY variables (as a hosted API behind a proxy needs); loopback must not use one."""
    for var in ("HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY", "http_proxy", "https_proxy", "all_proxy"):
        monkeypatch.delenv(var, raising=False)


@pytest.fixture
def server():
    s = FakeServer()
    yield s
    s.close()


@pytest.fixture
def infile(tmp_path):
    rows = make_rows([(q, str(i)) for i, q in enumerate(QUESTIONS)], data_source="test_math", split="train")
    return write_rows(rows, tmp_path / "in.parquet", {"name": "test_math"})


def run(server, infile, out, *extra, n=3):
    argv = [
        "--input",
        str(infile),
        "--output",
        str(out),
        "--rephrasings",
        str(n),
        "--base-url",
        server.base_url,
        "--model",
        "test-model",
        "--api-key-env",
        KEY_ENV,
        "--concurrency",
        "4",
        "--max-retries",
        "3",
        "--timeout-s",
        "5",
        *extra,
    ]
    if "--verify" not in extra:  # these runs test the requests and text checks; verifying: below
        argv += ["--verify", "0"]
    return rp.main(argv)


def cache_lines(path):
    return [json.loads(line) for line in Path(path).read_text().splitlines() if line.strip()]


# ----------------------------------------------------------------------------------------------
# The validator and the parser, directly

Q_NUM = QUESTIONS[0]  # numbers 120, 2.5, 4
Q_MATH = QUESTIONS[1]  # spans x^2+3x=10, x>0, x


def test_math_spans_compare_modulo_notation():
    """The paper's appendix A example rewrites $\\frac{1}{3}$ as 1/3: a valid rephrasing."""
    q = "He can hop only $\\frac{1}{3}$ of the distance, then $\\frac{1}{3}$ of what remains. After five hops?"
    assert (
        rp.check_rephrasing(
            q, "Hopping 1/3 of the distance, then 1/3 of the rest: where is he after five hops?"
        )
        is None
    )
    assert (
        rp.check_rephrasing("Solve $x^{2} = 4$ for $x > 0$.", "For positive x (so $x>0$), solve x^2=4.")
        is None
    )
    assert rp.check_rephrasing("Solve $x^{2} = 4$.", "Solve $y^{2} = 4$, please.") == "missing_math"


@pytest.mark.parametrize(
    ("original", "candidate", "accepted", "reason"),
    [
        (Q_NUM, "   \n ", (), "empty"),
        (Q_NUM, None, (), "empty"),
        (Q_NUM, "  " + Q_NUM.upper().replace(" ", " \n "), (), "copy"),
        (Q_NUM, good(Q_NUM, 1).lower(), (good(Q_NUM, 1),), "copy"),
        (Q_NUM, Q_NUM.replace("120", "one hundred twenty"), (), "missing_number"),
        (Q_NUM, Q_NUM.replace("2.5", "2.4"), (), "missing_number"),
        ("Add 7 and 7 and 3.", "Add 7 and 3 together.", (), "missing_number"),  # a multiset
        ("What is 6 - 2?", "Compute the value of 6 + 2.", (), "changed_operator"),  # same numbers, new answer
        ("What is 6 − 2 × 3?", "Work out 6 - 2 + 3.", (), "changed_operator"),  # × is *, − is -
        ("What is 2^5 + 1?", "What is 2*5 + 1?", (), "changed_operator"),
        (Q_MATH, Q_MATH.replace("$x^2 + 3x = 10$", "$y^2 + 3y = 10$"), (), "missing_math"),  # renamed
        (Q_MATH, Q_MATH.replace("$x > 0$", "$x \\ge 0$ and 0"), (), "missing_math"),
        (Q_NUM, Q_NUM + " Read it carefully." * 20, (), "length"),
        (Q_NUM, Q_NUM[:5] + " 120 2.5 4", (), "length"),
        ("What is 1+1? " * 150, "What is 1+1? " * 320, (), "length"),  # within 3x, but over 4,000 chars
    ],
)
def test_validator_rejection_reasons(original, candidate, accepted, reason):
    assert reason in rp.REASONS
    assert rp.check_rephrasing(original, candidate, accepted) == reason


@pytest.mark.parametrize(
    ("original", "candidate"),
    [
        (
            Q_NUM,
            "Moving at a steady pace, a train covers 120 miles in 2.5 hours. How far, in miles, does it go in 4 hours?",
        ),
        ("It costs 1,000 dollars and 2.50 more.", "The price: 1{,}000 dollars plus 2.5 more."),  # normalized
        (Q_MATH, "Given that $x>0$ and $x^2+3x=10$, find the value of \\(x\\)."),  # spaces and delimiters
        (
            "Sales tax on \\$5 is \\$0.40. What is the rate?",
            "What is the rate if the tax on \\$5 is \\$0.40?",
        ),
        (
            "Five apples and 3 pears.",
            "5 apples, 3 pears: five apples and three pears.",
        ),  # new numbers are fine
        ("What is 6 - 2 × 3?", "Evaluate 6 − 2*3 for me."),  # the same operators, other symbols
        ("What is 12 - 5?", "Subtract: 12 - 5 = ? What is it?"),
    ],
)
def test_validator_accepts(original, candidate):
    assert rp.check_rephrasing(original, candidate) is None


def test_numbers_and_math_spans():
    assert rp.numbers("1,000 and 1{,}000 and 1,\\!000, 2.50, .5, 007, x^2, 3.") == {
        "1000": 3,
        "2.5": 1,
        "0.5": 1,
        "7": 1,
        "2": 1,
        "3": 1,
    }
    text = r"pay \$5 for $x$, $$ y = 2 $$ and \(a + b\), \[c\], $ unclosed"
    assert rp.math_spans(text) == ["x", "y=2", "a+b", "c"]
    assert rp.math_spans(r"\( never closed and \[ nor this") == []


def test_parser_survives_any_output():
    assert rp.parse_rephrasings("<rephrasing> a </rephrasing>\n<REPHRASING>b</Rephrasing >") == ["a", "b"]
    # an unclosed block is dropped; so is a block that is reopened before it closes
    assert rp.parse_rephrasings("<rephrasing>x<rephrasing>y</rephrasing><rephrasing>cut off") == ["y"]
    # drafts inside a reasoning section do not count
    assert rp.parse_rephrasings(
        "<think><rephrasing>draft</rephrasing></think><rephrasing>z</rephrasing>"
    ) == ["z"]
    for junk in (
        None,
        42,
        b"<rephrasing>x</rephrasing>",
        "",
        "no tags at all",
        "</rephrasing></rephrasing>",
        "<<<>>>",
    ):
        assert rp.parse_rephrasings(junk) == []
    t0 = time.thread_time()
    huge = "<rephrasing>" * 300_000 + "</rephrasing>" * 10 + "x" * 5_000_000
    assert rp.parse_rephrasings(huge) == []  # past MAX_OUTPUT_CHARS: the closing tags are ignored
    rp.math_spans("\\(" * 100_000 + "$" * 3 + "\\[" * 100_000)
    # this thread's CPU time (load elsewhere does not count): ~0.1 s here, 10 s leaves room for a
    # slow CPU; a scan that restarts at every one of the 300,000 tags would take hours
    assert time.thread_time() - t0 < 10.0


def test_instruction_examples_follow_our_own_rules():
    """Every worked example in INSTRUCTION passes the validator against its question."""
    examples = rp.INSTRUCTION.split("\nExample ")[1:]
    assert len(examples) == 4
    for ex in examples:
        question = ex.split("Question: ", 1)[1].split("\n", 1)[0]
        blocks = rp.parse_rephrasings(ex)
        assert len(blocks) == int(ex.split("Write ", 1)[1][0]) >= 2
        for i, b in enumerate(blocks):
            assert rp.check_rephrasing(question, b, blocks[:i]) is None, b


def test_fill_rule_and_cache_key():
    assert rp.fill("q", ["a", "b"], 3) == ["a", "b", "a"]
    assert rp.fill("q", ["a"], 3) == ["a", "a", "a"]
    assert rp.fill("q", [], 2) == ["q", "q"]
    assert rp.fill("q", ["a", "b", "c"], 3) == ["a", "b", "c"]
    k = rp.cache_key("q", "m", 3)
    assert (
        k != rp.cache_key("q ", "m", 3) and k != rp.cache_key("q", "m2", 3) and k != rp.cache_key("q", "m", 4)
    )
    assert rp.INSTRUCTION_VERSION in json.dumps(["q", "m", 3, rp.INSTRUCTION_VERSION])


# ----------------------------------------------------------------------------------------------
# Whole runs against the server


def test_clean_run(server, infile, tmp_path, capsys, monkeypatch):
    monkeypatch.setenv(KEY_ENV, SECRET)
    out = tmp_path / "out.parquet"
    assert run(server, infile, out) == 0
    stdout = capsys.readouterr().out

    before, after = pq.read_table(infile), pq.read_table(out)
    assert after.drop(["rephrasings"]).equals(before.drop(["rephrasings"]))
    assert after.column_names == before.column_names
    for row in after.to_pylist():
        reph = row["rephrasings"]
        assert len(reph) == 3
        for i, r in enumerate(reph):
            assert rp.check_rephrasing(row["extra_info"]["question"], r, reph[:i]) is None
        assert reph == [good(row["extra_info"]["question"], i) for i in range(3)]

    assert len(server.log) == 6 and {e["question"] for e in server.log} == set(QUESTIONS)
    for e in server.log:
        assert e["path"] == "/v1/chat/completions" and e["k"] == 3
        assert e["body"]["model"] == "test-model" and e["body"]["temperature"] == 0.8
        assert "max_tokens" not in e["body"]  # the endpoint's own limit unless --max-tokens
        assert e["body"]["messages"] == [{"role": "user", "content": rp.user_message(e["question"], 3)}]
        assert e["auth"] == f"Bearer {SECRET}"

    meta = read_meta(out)
    assert meta["model"] == "test-model" and meta["n"] == 3
    assert meta["instruction_version"] == rp.INSTRUCTION_VERSION
    assert meta["input_meta"] == {"name": "test_math"}
    c = meta["counts"]
    assert (c["rows"], c["questions"], c["requested"], c["accepted"]) == (6, 6, 18, 18)
    assert c["acceptance_rate"] == 1.0 and sum(c["rejected"].values()) == 0
    assert (c["filled_questions"], meta["filled_rows"], c["http_requests"], c["retries"]) == (0, [], 6, 0)
    assert "rephrasings: requested 18, accepted 18 (100.0%)" in stdout
    assert "requests: 6, retries: 0" in stdout
    assert len(cache_lines(str(out) + ".cache.jsonl")) == 6


def test_max_tokens_reaches_every_request(server, infile, tmp_path):
    assert run(server, infile, tmp_path / "out.parquet", "--max-tokens", "300") == 0
    assert server.log and all(e["body"]["max_tokens"] == 300 for e in server.log)


def test_duplicate_questions_share_one_request(server, tmp_path, capsys):
    pairs = [(QUESTIONS[0], "1"), (QUESTIONS[1], "2"), (QUESTIONS[0], "1")]
    infile = write_rows(make_rows(pairs, data_source="d", split="train"), tmp_path / "in.parquet")
    out = tmp_path / "out.parquet"
    assert run(server, infile, out, n=2) == 0
    assert len(server.log) == 2
    rows = pq.read_table(out).to_pylist()
    assert rows[0]["rephrasings"] == rows[2]["rephrasings"] == [good(QUESTIONS[0], i) for i in range(2)]
    assert read_meta(out)["counts"]["questions"] == 2 and read_meta(out)["counts"]["rows"] == 3


def test_each_rejection_is_asked_again(server, infile, tmp_path, capsys):
    q0, q1, q2, q3, q4, q5 = QUESTIONS
    bad = {
        q0: ("missing_number", q0.replace("120", "one hundred twenty")),
        q1: ("missing_math", q1.replace("$x^2 + 3x = 10$", "$y^2 + 3y = 10$")),
        q2: ("copy", q2.upper()),
        q3: ("empty", "  "),
        q4: ("length", q4 + " Read it carefully." * 20),
    }
    for q, (_, text) in bad.items():  # round 1: two good ones and one bad one
        server.script[q] = [("text", tags(good(q, 0), text, good(q, 1)))]
    server.script[q5] = [("text", "Sure! Here are rephrasings: 1. ... <rephrasing>cut off")]  # no blocks

    out = tmp_path / "out.parquet"
    assert run(server, infile, out) == 0
    for q in bad:
        reqs = server.requests_for(q)
        assert [e["k"] for e in reqs] == [3, 1]  # round 2 asks only for the missing one
        assert reqs[1]["content"] == rp.user_message(q, 1, [good(q, 0), good(q, 1)])
    assert [e["k"] for e in server.requests_for(q5)] == [3, 3]

    c = read_meta(out)["counts"]
    assert c["rejected"] == {
        "empty": 1,
        "copy": 1,
        "states_answer": 0,
        "missing_number": 1,
        "changed_sign": 0,
        "changed_operator": 0,
        "missing_math": 1,
        "length": 1,
        "wrong_answer": 0,
        "unparsed": 3,
    }
    assert (c["requested"], c["accepted"], c["filled_questions"]) == (26, 18, 0)
    assert c["http_requests"] == 12
    rows = pq.read_table(out).to_pylist()
    assert rows[0]["rephrasings"] == [good(q0, 0), good(q0, 1), good(q0, 3)]
    stdout = capsys.readouterr().out
    assert "rephrasings: requested 26, accepted 18 (69.2%)" in stdout
    assert (
        "rejected: empty 1, copy 1, states_answer 0, missing_number 1, changed_sign 0, changed_operator 0, "
        "missing_math 1, length 1, wrong_answer 0, unparsed 3" in stdout
    )


def test_retries_then_success(server, infile, tmp_path, capsys):
    q0, q1, q2, q3, q4, _ = QUESTIONS
    server.script[q0] = [("status", 500, {}, "boom")]
    server.script[q1] = [("status", 429, {"Retry-After": "0.4"}, "slow down")]
    server.script[q2] = [("sleep", 1.5)]  # beyond the client's 0.5 s timeout
    server.script[q3] = [("status", 502, {}, "bad gateway"), ("status", 503, {}, "unavailable")]
    server.script[q4] = [("raw", b"<html>not json</html>")]
    out = tmp_path / "out.parquet"
    assert run(server, infile, out, "--timeout-s", "0.5") == 0
    stdout = capsys.readouterr().out

    assert [e["action"] for e in server.requests_for(q0)] == [500, "text"]
    assert [e["action"] for e in server.requests_for(q3)] == [502, 503, "text"]
    assert [e["action"] for e in server.requests_for(q2)] == ["sleep", "text"]
    r429 = server.requests_for(q1)
    assert [e["action"] for e in r429] == [429, "text"]
    assert r429[1]["t"] - r429[0]["t"] >= 0.4  # Retry-After honoured (the backoff alone is ~0.01 s)
    # a 200 that is not a chat completion is an answer without rephrasings: asked again next round
    assert [(e["action"], e["k"]) for e in server.requests_for(q4)] == [("raw", 3), ("text", 3)]
    assert len(server.log) == 12
    c = read_meta(out)["counts"]
    assert (c["http_requests"], c["retries"], c["accepted"]) == (12, 5, 18)
    assert "requests: 12, retries: 5" in stdout and "this run: asked 6 question(s)" in stdout


def test_retries_exhausted_stop_the_run(server, infile, tmp_path, capsys):
    server.fail_after = 0
    out = tmp_path / "out.parquet"
    assert run(server, infile, out, "--concurrency", "1", "--max-retries", "2") == 1
    err = capsys.readouterr().err
    assert "still failing after 2 retries: HTTP 500" in err
    assert "0 of 6 questions are finished" in err and not out.exists()
    per_question = [len(server.requests_for(q)) for q in QUESTIONS]
    assert max(per_question) == 3 and sum(per_question) < 18  # 1 + 2 retries, then the run stops


def test_a_retry_after_beyond_the_sdks_limit_is_reported_with_the_retries_really_made(
    server, infile, tmp_path, capsys
):
    """A 429 asking for 100,000 s: the SDK does not retry (it waits at most 120 s), and the error
    says so: 0 retries, not the --max-retries it was allowed."""
    server.script[QUESTIONS[0]] = [("status", 429, {"Retry-After": "100000"}, "slow down")]
    out = tmp_path / "out.parquet"
    assert run(server, infile, out, "--concurrency", "1", "--max-retries", "3") == 1
    err = capsys.readouterr().err
    assert len(server.requests_for(QUESTIONS[0])) == 1
    assert (
        "still failing after 0 retries: HTTP 429 (the server asked to wait 100000 s before retrying, "
        "Retry-After; this tool waits at most 120 s, so it did not retry: try again later)"
    ) in err


def test_a_key_the_endpoint_echoes_into_an_answer_is_redacted_before_caching(
    server, infile, tmp_path, monkeypatch
):
    """An endpoint that copies the Authorization header into its rephrasings: they are accepted,
    and neither the cache nor the output holds the key."""
    monkeypatch.setenv(KEY_ENV, SECRET)
    q = QUESTIONS[0]
    server.script[q] = [("text", tags(*(f"{good(q, i)} (Bearer {SECRET})" for i in range(3))))]
    out = tmp_path / "out.parquet"
    assert run(server, infile, out) == 0
    assert server.log[0]["auth"] == f"Bearer {SECRET}"
    cache = Path(str(out) + ".cache.jsonl")
    (record,) = [r for r in cache_lines(cache) if r["question"] == q]
    assert "(Bearer ***)" in json.dumps(record)
    for blob in (cache.read_bytes(), out.read_bytes()):
        assert SECRET.encode() not in blob


def test_401_stops_at_once_and_never_shows_the_key(server, infile, tmp_path):
    for q in QUESTIONS:
        server.script[q] = [("status", 401, {}, f"Incorrect API key provided: {SECRET}")] * 5
    out = tmp_path / "out.parquet"
    cmd = [sys.executable, "-m", "recipes.tools.rephrase", "--input", str(infile), "--output", str(out)]
    cmd += [
        "--rephrasings",
        "3",
        "--base-url",
        server.base_url + "/",
        "--model",
        "m",
        "--api-key-env",
        KEY_ENV,
    ]
    cmd += ["--concurrency", "1"]
    env = {"PATH": "/usr/bin:/bin", KEY_ENV: SECRET}
    proc = subprocess.run(cmd, cwd=REPO, env=env, capture_output=True, text=True, timeout=60)
    assert proc.returncode == 1
    assert len(server.log) == 1 and server.log[0]["auth"] == f"Bearer {SECRET}"
    url = server.base_url + "/chat/completions"
    error = [line for line in proc.stderr.splitlines() if line.startswith("error:")]
    assert error == [
        f"error: HTTP 401 from {url}: " + '{"error": {"message": "Incorrect API key provided: ***"}}'
    ]
    assert SECRET not in proc.stderr + proc.stdout
    assert not out.exists()
    assert cache_lines(str(out) + ".cache.jsonl") == []


def test_api_key_never_written(server, infile, tmp_path, capsys, monkeypatch):
    monkeypatch.setenv(KEY_ENV, SECRET)
    server.script[QUESTIONS[0]] = [("status", 500, {}, f"echo {SECRET}")]
    server.script[QUESTIONS[1]] = [("text", "garbage " + SECRET)]
    out = tmp_path / "out.parquet"
    assert run(server, infile, out) == 0
    captured = capsys.readouterr()
    assert all(e["auth"] == f"Bearer {SECRET}" for e in server.log) and len(server.log) == 8
    assert SECRET not in captured.out + captured.err
    cache = Path(str(out) + ".cache.jsonl")
    assert len(cache_lines(cache)) == 6
    for blob in (cache.read_bytes(), out.read_bytes()):
        assert SECRET.encode() not in blob
    # without the variable no Authorization header is sent (a local vllm server needs none)
    monkeypatch.delenv(KEY_ENV)
    server.log.clear()
    assert run(server, infile, tmp_path / "out2.parquet") == 0
    assert server.log and all(e["auth"] == "Bearer EMPTY" for e in server.log)  # the SDK's placeholder
    assert f"${KEY_ENV} is not set" in capsys.readouterr().err


def test_resume_asks_only_for_missing_questions(server, infile, tmp_path, capsys):
    out = tmp_path / "out.parquet"
    cache = Path(str(out) + ".cache.jsonl")
    server.fail_after = 2  # the endpoint goes away after two answers
    assert run(server, infile, out, "--concurrency", "1", "--max-retries", "1") == 1
    err = capsys.readouterr().err
    assert "2 of 6 questions are finished" in err and "rerun the same command" in err
    assert not out.exists()
    kept = cache_lines(cache)
    assert len(kept) == 2 and all(r["complete"] and len(r["rephrasings"]) == 3 for r in kept)
    assert all(SECRET not in json.dumps(r) for r in kept)
    done = {r["question"] for r in kept}
    with cache.open("ab") as f:  # a line cut short by a crash, inside a multi-byte character
        f.write('{"key": "abc", "question": "café'.encode()[:-1])

    server.fail_after, server.log = None, []
    assert run(server, infile, out) == 0
    captured = capsys.readouterr()
    assert "skipped 1 unreadable line" in captured.err
    assert sorted(e["question"] for e in server.log) == sorted(set(QUESTIONS) - done)
    assert "this run: asked 4 question(s) (2 from the cache)" in captured.out
    rows = pq.read_table(out).to_pylist()
    by_q = {r["extra_info"]["question"]: r["rephrasings"] for r in rows}
    for r in kept:
        assert by_q[r["question"]] == r["rephrasings"]
    assert all(len(r["rephrasings"]) == 3 for r in rows)
    lines = [line for line in cache.read_bytes().decode(errors="replace").splitlines() if line.strip()]
    assert len(lines) == 7 and json.loads(lines[3])["question"] in set(QUESTIONS) - done

    server.log = []  # everything cached: no request at all, same output
    first = pq.read_table(out)
    assert run(server, infile, out) == 0
    assert server.log == [] and pq.read_table(out).equals(first)


def test_fill_rule_and_report(server, infile, tmp_path, capsys):
    q0, q1, q2 = QUESTIONS[:3]
    server.script[q0] = [("text", tags(good(q0, 0), good(q0, 0), good(q0, 0)))] + [
        ("text", tags(good(q0, 0), good(q0, 0)))
    ] * 5  # one accepted, then only copies
    server.script[q1] = [("text", "no idea")] * 5  # nothing accepted
    server.script[q2] = [("text", tags(good(q2, 0), good(q2, 1), "")), ("text", tags(q2))] * 3
    out = tmp_path / "out.parquet"
    assert run(server, infile, out, "--max-rounds", "2") == 0
    rows = pq.read_table(out).to_pylist()
    assert rows[0]["rephrasings"] == [good(q0, 0)] * 3
    assert rows[1]["rephrasings"] == [q1] * 3
    assert rows[2]["rephrasings"] == [good(q2, 0), good(q2, 1), good(q2, 0)]
    assert [len(server.requests_for(q)) for q in (q0, q1, q2)] == [2, 2, 2]  # --max-rounds 2
    meta = read_meta(out)
    assert meta["filled_rows"] == [0, 1, 2] and meta["counts"]["filled_questions"] == 3
    assert meta["counts"]["rejected"]["copy"] == 2 + 2 + 1
    stdout = capsys.readouterr().out
    assert "filled: 3 question(s), 3 row(s) had fewer than 3 valid rephrasings after 2 round(s)" in stdout
    assert "rows [0, 1, 2]" in stdout


def test_bad_input_fails_before_any_request(server, tmp_path, capsys):
    rows = make_rows([(QUESTIONS[0], "1")], data_source="d", split="train")
    table = pa.Table.from_pylist([{k: v for k, v in r.items() if k != "rephrasings"} for r in rows])
    bad = tmp_path / "bad.parquet"
    pq.write_table(table, bad)
    assert run(server, bad, tmp_path / "out.parquet") == 2  # bad input
    err = capsys.readouterr().err
    assert "error: invalid input:" in err and "'rephrasings'" in err and "missing column" in err
    assert server.log == [] and not (tmp_path / "out.parquet").exists()
    assert run(server, tmp_path / "nope.parquet", tmp_path / "out.parquet") == 2
    assert "nope.parquet: no such file" in capsys.readouterr().err and server.log == []


def test_ctrl_c_keeps_finished_questions(server, infile, tmp_path):
    for q in QUESTIONS[1:]:
        server.script[q] = [("sleep", 5.0)]
    out = tmp_path / "out.parquet"
    cache = Path(str(out) + ".cache.jsonl")
    cmd = [sys.executable, "-m", "recipes.tools.rephrase", "--input", str(infile), "--output", str(out)]
    cmd += [
        "--rephrasings",
        "3",
        "--base-url",
        server.base_url,
        "--model",
        "m",
        "--concurrency",
        "1",
        "--verify",
        "0",
    ]
    proc = subprocess.Popen(
        cmd,
        cwd=REPO,
        env={"PATH": "/usr/bin:/bin"},
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        # as from a terminal: a suite started in the background (`make test &`, nohup) passes SIGINT
        # on ignored, and Python then installs no KeyboardInterrupt handler
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),
    )
    deadline = time.monotonic() + 30
    while not (cache.exists() and cache_lines(cache)) or len(server.log) < 2:
        assert time.monotonic() < deadline and proc.poll() is None
        time.sleep(0.05)
    proc.send_signal(signal.SIGINT)
    _, err = proc.communicate(timeout=30)
    assert proc.returncode == 130
    assert "error: interrupted" in err and "1 of 6 questions are finished" in err
    assert [r["question"] for r in cache_lines(cache)] == [QUESTIONS[0]] and not out.exists()


@pytest.mark.slow  # a fresh interpreter (or several) importing verl
def test_a_dead_or_hanging_endpoint_fails_fast_with_default_settings(infile, tmp_path, capsys):
    """With the defaults, the probe (GET /models, 10 s, one retry) is what fails: refused in ~0.5 s
    (one backoff), hanging in ~21 s (two 10 s timeouts). Each bound is several times that and
    below what a probe with the client's defaults would take (5 retries: over 11 s refused, over
    70 s hanging; the 120 s timeout: 240 s)."""
    import socket

    import openai  # noqa: F401  (imported before the clock starts: a loaded machine's import is not timed)

    refused = socket.socket()
    refused.bind(("127.0.0.1", 0))  # bound, never listening: connection refused
    hanging = socket.socket()
    hanging.bind(("127.0.0.1", 0))
    hanging.listen(64)  # accepts connections, never answers
    try:
        for sock, seconds in ((refused, 8), (hanging, 45)):
            port = sock.getsockname()[1]
            out = tmp_path / f"{port}.parquet"
            argv = ["--input", str(infile), "--output", str(out), "--rephrasings", "3", "--model", "m"]
            t0 = time.monotonic()
            assert rp.main([*argv, "--base-url", f"http://127.0.0.1:{port}/v1"]) == 1
            assert time.monotonic() - t0 < seconds
            err = capsys.readouterr().err
            assert f"error: nothing answers at http://127.0.0.1:{port}/v1" in err and not out.exists()
    finally:
        refused.close()
        hanging.close()


def test_a_hung_endpoint_stops_the_run_after_stall_s(server, infile, tmp_path, capsys):
    """--stall-s 1.5 stops the run in ~2.5 s; the server would answer after 60 s and the requests
    time out after 90 s, so a watchdog that does not fire takes 60 s or more: the 20 s bound has
    room both ways. (The server's handler threads are daemons: closing it does not wait for them.)"""
    for q in QUESTIONS:
        server.script[q] = [("sleep", 60.0)]
    out = tmp_path / "out.parquet"
    t0 = time.monotonic()
    assert run(server, infile, out, "--timeout-s", "90", "--stall-s", "1.5") == 1
    assert time.monotonic() - t0 < 20
    err = capsys.readouterr().err
    assert "seems to hang" in err and "0 of 6 questions are finished" in err and not out.exists()


def test_too_many_filled_questions_fail_and_the_cache_writes_them_later(server, infile, tmp_path, capsys):
    for q in QUESTIONS[:4]:
        server.script[q] = [("text", "no idea")] * 3
    out = tmp_path / "out.parquet"
    assert run(server, infile, out, "--max-rounds", "1") == 1  # 4 of 6 > 0.5
    captured = capsys.readouterr()
    assert (
        "error: 4 of 6 questions have fewer than 3 valid rephrasings (more than --max-filled 0.5)"
        in captured.err
    )
    assert "filled: 4 question(s)" in captured.out and not out.exists()
    server.log.clear()
    assert run(server, infile, out, "--max-rounds", "1", "--max-filled", "1") == 0
    assert server.log == []  # from the cache
    rows = pq.read_table(out).to_pylist()
    assert [r["rephrasings"] == [r["extra_info"]["question"]] * 3 for r in rows] == [True] * 4 + [False] * 2


def test_a_key_given_as_the_variable_name_is_never_echoed(infile, tmp_path, capsys):
    with pytest.raises(SystemExit) as exit_:
        rp.main(
            ["--input", str(infile), "--output", str(tmp_path / "o.parquet"), "--rephrasings", "3"]
            + ["--base-url", "http://127.0.0.1:9/v1", "--model", "m", "--api-key-env", SECRET]
        )
    assert exit_.value.code == 2
    err = capsys.readouterr().err
    assert "--api-key-env takes the NAME of an environment variable" in err and SECRET not in err


def test_the_old_option_name_still_works_and_says_its_new_name(tmp_path, capsys):
    args = rp.build_parser().parse_args(
        ["--input", "i", "--output", "o", "--n", "3", "--base-url", "http://127.0.0.1:9/v1", "--model", "m"]
    )
    assert args.n == 3
    missing = tmp_path / "missing.parquet"
    argv = ["--input", str(missing), "--output", str(tmp_path / "o.parquet"), "--n", "3"]
    assert rp.main([*argv, "--base-url", "http://127.0.0.1:9/v1", "--model", "m"]) == 2  # no input
    err = capsys.readouterr().err
    assert err.startswith("note: --n is now --rephrasings; the old name goes in the next release\n")
    assert str(missing) in err


# ----------------------------------------------------------------------------------------------
# Verification (--verify K): the endpoint solves each candidate; the grader compares with the answer

SIX_MINUS_TWO = "What is 6 - 2?"
ANSWER_CHANGERS = {  # each keeps every number and operator of the question, and changes its answer
    "Compute -6 - 2.": "changed_sign",  # text check
    "Compute 6 - 2. (Hint: the answer is 99.)": "states_answer",  # text check
    "Compute 6 - 2 + 1.": "wrong_answer",  # 5: only solving it shows it
    "Compute (6 - 2) * 0, then report it.": "wrong_answer",  # 0
}


def arithmetic(problem: str) -> str:
    """A stand-in solver: follows a hint if there is one, else evaluates the problem's arithmetic."""
    import re

    if m := re.search(r"answer is (\d+)", problem):
        return m.group(1)
    expr = re.sub(r"[^0-9+\-*/() ]", "", problem.split("then")[0]).strip()
    return str(int(eval(expr)))  # noqa: S307 - digits, operators and parentheses only


def test_verification_rejects_rephrasings_that_change_the_answer(server, tmp_path, capsys):
    server.questions.append(SIX_MINUS_TWO)
    server.solver = arithmetic
    kept = "Find the value of 6 - 2."
    server.script[SIX_MINUS_TWO] = [("text", tags(*ANSWER_CHANGERS, kept))]
    infile = write_rows(
        make_rows([(SIX_MINUS_TWO, "4")], data_source="d", split="train"), tmp_path / "in.parquet"
    )
    out = tmp_path / "out.parquet"
    assert (
        run(
            server,
            infile,
            out,
            "--verify",
            "3",
            "--verify-max-tokens",
            "64",
            "--max-rounds",
            "1",
            "--max-filled",
            "1",
            n=5,
        )
        == 0
    )
    # the text checks stop two; the two that pass them are solved, with the one good rephrasing
    solved = [e["problem"] for e in server.solves]
    assert sorted(solved) == sorted(["Compute 6 - 2 + 1.", "Compute (6 - 2) * 0, then report it.", kept])
    assert all(e["n"] == 3 and e["max_tokens"] == 64 for e in server.solves)
    c = read_meta(out)["counts"]
    expected = {reason: 0 for reason in c["rejected"]}
    for reason in ANSWER_CHANGERS.values():
        expected[reason] += 1
    assert c["rejected"] == expected and c["accepted"] == 1
    assert (c["verified"], c["verify_requests"], c["verify_tokens"]) == (3, 3, 3 * (50 + 30))
    assert pq.read_table(out).to_pylist()[0]["rephrasings"] == [kept] * 5  # filled from the one kept
    record = cache_lines(str(out) + ".cache.jsonl")[0]
    assert {v["text"]: v["correct"] for v in record["verified"]} == {
        "Compute 6 - 2 + 1.": 0,
        "Compute (6 - 2) * 0, then report it.": 0,
        kept: 3,
    }
    stdout = capsys.readouterr().out
    assert (
        "verification: 3 candidate(s) solved by the endpoint, 2 rejected as wrong_answer; cost 3 requests, 240 tokens"
        in stdout
    )
    assert read_meta(out)["verify"] == 3


def verify_once(server, candidate: str, answer: str, k: int) -> tuple[int, int]:
    """rp.verify against the server: (solutions graded right, HTTP requests)."""
    import asyncio

    from rewards.grade import Grader

    async def go():
        client = rp.Client(server.base_url, "test-model", None, 0.8, 5.0, 0, 1)
        grader = Grader(num_workers=1)
        try:
            async with client:
                correct, reqs, _, _ = await rp.verify(client, grader, candidate, answer, k)
        finally:
            grader.close()
        return correct, reqs

    return asyncio.run(go())


def test_a_majority_decides_and_the_answer_is_part_of_the_cache_key(server):
    """Each solution graded on its own; the verdict is a strict majority of K: 2 of 3 keeps a
    rephrasing, 1 of 3 does not. The ground truth is part of the cache key."""
    batches = iter([["4", "4", "7"], ["4", "7", "x"], ["4", "4"]])
    server.solver = lambda problem: next(batches)
    assert verify_once(server, "Find the value of 6 - 2.", "4", 3) == (2, 1)
    assert verify_once(server, "Find the value of 6 - 2.", "4", 3) == (1, 1)
    # an endpoint that returns fewer solutions than asked: the missing ones count as wrong
    assert verify_once(server, "Find the value of 6 - 2.", "4", 3) == (2, 1)
    assert [e["n"] for e in server.solves] == [3, 3, 3]
    keys = {rp.cache_key("q", "m", 3, 3, "4"), rp.cache_key("q", "m", 3, 3, "5"), rp.cache_key("q", "m", 3)}
    assert len(keys) == 3
