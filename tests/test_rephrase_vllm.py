"""The rephrasing CLI against a real OpenAI-compatible endpoint: vLLM's own server (its CPU build,
`python -m vllm.entrypoints.openai.api_server`, what `vllm serve` runs) on 127.0.0.1, serving
SmolLM2-135M-Instruct. No fakes: real HTTP, real completions, our parser and validator on what a
small model actually writes. About 1-2 minutes on 2 cores (one engine start, 4 questions).

tests/test_rephrase.py covers retries, errors, resume and key handling against a scripted server;
this test is the end-to-end check that the request format, the answer format and the report work
with a real server."""

import asyncio
import json
import os
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from recipes.platforms.cpu_vllm import vllm_env
from recipes.tools import rephrase as rp
from recipes.tools.data import make_rows, read_meta, write_rows

pytestmark = [pytest.mark.slow, pytest.mark.vllm, pytest.mark.timeout(900)]

REPO = Path(__file__).resolve().parents[1]
QUESTIONS = {  # two of the toy set's kind, a word problem, one with LaTeX; their answers
    "What is 12 + 7?": "19",
    "What is (3 + 4) * 5?": "35",
    "Tom has 15 apples and gives 4 of them to Ann. How many apples does Tom have left?": "11",
    "What is the value of $3x + 2$ when $x = 5$?": "17",
}


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="module")
def endpoint(smollm2_model, tmp_path_factory):
    """vLLM's OpenAI-compatible server on a free loopback port; yields (base URL, its log)."""
    root = tmp_path_factory.mktemp("vllm_server")
    port = free_port()
    (root / "sockets").mkdir()
    env = {**os.environ, **vllm_env(root / "sockets")}
    for var in ("HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY", "http_proxy", "https_proxy", "all_proxy"):
        env.pop(var, None)
    cmd = [sys.executable, "-m", "vllm.entrypoints.openai.api_server", "--model", str(smollm2_model)]
    cmd += ["--served-model-name", "smollm2", "--host", "127.0.0.1", "--port", str(port)]
    # float32: bf16 has no fast kernels on most CPUs (scripts/bench/cpu_precision.py)
    cmd += ["--dtype", "float32", "--enforce-eager", "--max-model-len", "2048", "--seed", "0"]
    cmd += ["--kv-cache-memory-bytes", str(512 * 2**20), "--max-num-batched-tokens", "2048"]
    # the model in the engine core, no worker process of its own (vllm 7 of docs/cpu_platform.md)
    cmd += ["--distributed-executor-backend", "uni"]
    log = root / "server.log"
    with log.open("w") as f:
        server = subprocess.Popen(cmd, cwd=REPO, env=env, stdout=f, stderr=subprocess.STDOUT)
    base = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 420
        while True:
            assert server.poll() is None, log.read_text()[-4000:]
            assert time.monotonic() < deadline, log.read_text()[-4000:]
            try:
                with urllib.request.urlopen(f"{base}/health", timeout=2) as resp:
                    if resp.status == 200:
                        break
            except OSError:
                time.sleep(1)
        yield f"{base}/v1", log
    finally:
        server.terminate()
        try:
            server.wait(timeout=60)
        except subprocess.TimeoutExpired:
            server.kill()
            server.wait()


def test_rephrase_cli_against_vllms_openai_server(endpoint, tmp_path, monkeypatch, capsys):
    base_url, log = endpoint
    for var in ("HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY", "http_proxy", "https_proxy", "all_proxy"):
        monkeypatch.delenv(var, raising=False)
    rows = make_rows(list(QUESTIONS.items()), data_source="real", split="train")
    infile = write_rows(rows, tmp_path / "in.parquet", {"name": "real"})
    out = tmp_path / "out.parquet"
    argv = ["--input", str(infile), "--output", str(out), "--rephrasings", "3", "--base-url", base_url]
    argv += ["--model", "smollm2", "--max-rounds", "2", "--max-tokens", "160", "--timeout-s", "300"]
    argv += ["--api-key-env", "RECIPES_TEST_NO_KEY", "--max-filled", "1"]  # a 135M model: report, don't fail
    argv += ["--verify", "3", "--verify-max-tokens", "96"]  # the same server solves each candidate 3 times
    assert rp.main(argv) == 0
    stdout = capsys.readouterr().out

    meta = read_meta(out)
    c = meta["counts"]
    assert meta["model"] == "smollm2" and c["questions"] == c["rows"] == len(QUESTIONS)
    # every request reached vLLM and was answered, no retry: one per question and round, and one
    # (3 solutions) per candidate that passed the text checks
    served = log.read_text().count('"POST /v1/chat/completions HTTP/1.1" 200')
    assert served == c["http_requests"] and c["retries"] == 0
    assert len(QUESTIONS) <= c["http_requests"] - c["verify_requests"] <= 2 * len(QUESTIONS)  # --max-rounds 2
    # a 135M model rarely follows the format: 2 of 48 candidates (8 questions) passed the text
    # checks in one run, none in another (its draws depend on how requests share batches), so the verification
    # request is also made directly below
    assert c["verify_requests"] == c["verified"] and (c["verify_tokens"] > 0) == (c["verified"] > 0)
    assert c["verified"] == c["accepted"] + c["rejected"]["wrong_answer"]
    # each candidate asked for is accepted, rejected for a named reason, or was not delivered
    assert c["accepted"] + sum(c["rejected"].values()) == c["requested"] >= 3 * len(QUESTIONS)
    assert c["acceptance_rate"] == pytest.approx(c["accepted"] / c["requested"], abs=1e-4)
    rate = f"{100 * c['acceptance_rate']:.1f}%"
    assert f"rephrasings: requested {c['requested']}, accepted {c['accepted']} ({rate})" in stdout
    cache = [json.loads(line) for line in Path(str(out) + ".cache.jsonl").read_text().splitlines()]
    assert len(cache) == len(QUESTIONS)
    for row in pq.read_table(out).to_pylist():
        assert len(row["rephrasings"]) == 3
        record = next(r for r in cache if r["question"] == row["extra_info"]["question"])
        accepted = record["rephrasings"]
        for i, text in enumerate(accepted):  # what the model wrote and our validator accepted
            assert rp.check_rephrasing(row["extra_info"]["question"], text, accepted[:i]) is None
        # each kept one was solved right by at least 2 of 3 of the model's own solutions
        verdicts = {v["text"]: v["correct"] for v in record["verified"]}
        assert all(verdicts[text] >= 2 for text in accepted)
        filled = rp.fill(row["extra_info"]["question"], accepted[:3], 3)
        assert row["rephrasings"] == filled
    print(f"acceptance on {len(QUESTIONS)} questions: {c['acceptance_rate']:.2f}; rejected {c['rejected']}")


def test_the_verification_request_against_vllms_openai_server(endpoint, monkeypatch):
    """What `--verify K` sends for a candidate: one request for K sampled solutions (`n=K`,
    the solution token limit), answered with K texts and the token count vLLM reports."""
    base_url, log = endpoint
    for var in ("HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY", "http_proxy", "https_proxy", "all_proxy"):
        monkeypatch.delenv(var, raising=False)
    before = log.read_text().count('"POST /v1/chat/completions HTTP/1.1" 200')

    async def solve():
        client = rp.Client(base_url, "smollm2", None, 0.8, 300.0, 0, 1, verify_max_tokens=96)
        async with client:
            return await client.solve("What is 12 + 7?", 3)

    texts, requests, retries, tokens = asyncio.run(solve())
    assert len(texts) == 3 and all(isinstance(t, str) and t.strip() for t in texts)
    assert (requests, retries) == (1, 0) and tokens > 0
    assert log.read_text().count('"POST /v1/chat/completions HTTP/1.1" 200') == before + 1
