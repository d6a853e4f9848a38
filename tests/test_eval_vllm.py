"""eval.run's vLLM backend on the real engine (vLLM's CPU build, no fakes), end to end.

One `python -m eval.run` with no --backend and no memory settings (so: the default backend, vllm
here, and its CPU defaults) over the three fixture benchmarks, 2 greedy repeats, shared by the
module: it must finish with one engine for every benchmark and repeat, its samples must agree with
the transformers backend's greedy samples on the same prompts, and it must leave nothing behind in
the home folder, the temporary folder or /dev/shm. One engine start (~1 minute on 2 cores).

The converted checkpoints of a real training run are evaluated through this backend by
tests/test_eval_e2e.py. Skip both with `-m "not vllm"`."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from greedy_check import first_differences  # tests/greedy_check.py

from eval import benchmarks as bm
from eval import run as eval_run
from eval.backends import Decoding
from eval.prompts import prompt_token_ids
from eval.results import prompt_sha
from recipes.platforms.cpu_vllm import shm_files
from recipes.tools import models

pytestmark = [
    pytest.mark.slow,
    pytest.mark.vllm,
]

REPO = Path(__file__).resolve().parents[1]
FIXTURES = REPO / "tests" / "fixtures" / "eval"
BENCHES = ["arith", "mixed", "gpqa_diamond"]  # 6 + 4 + 3 questions
RUNS = 2
SMALL = Decoding(max_new_tokens=24, max_model_len=512)
VLLM_ENV = ("VLLM_CACHE_ROOT", "VLLM_RPC_BASE_PATH", "VLLM_NO_USAGE_STATS", "VLLM_CONFIG_ROOT")
# Two float32 greedy decoders may part where the model's two best tokens are this close (nats):
# vLLM's CPU kernels and transformers' sum in other orders, which moves a log-prob of this tiny
# model by ~1e-5 (up to 9e-6 between its batched, single and left-padded transformers forwards
# here); 1e-3 leaves 100x room and is far below the gaps where a genuinely different
# decoder parts (sampling at temperature 1 against greedy: 0.08 to 6.9 nats over 24 samples).
NEAR_TIE_NATS = 1e-3


@pytest.fixture(scope="module")
def tiny(tmp_path_factory) -> Path:
    """The tiny model (head_dim 32, float32) with a short warm start: it answers "The answer is
    \\boxed{N}." with varied, mostly wrong N, so that the answers of two backends can be compared."""
    return models.build_tiny(tmp_path_factory.mktemp("tiny") / "model", seed=0, warm_start_steps=150)


@pytest.fixture(scope="module")
def vllm_run(tiny, tmp_path_factory, shm_not_ours) -> dict:
    """`python -m eval.run` with the defaults of backend and memory, a home and a temporary folder
    of its own (to see what it leaves there; torch inductor's cache stays in the usual one), and
    /dev/shm watched."""
    home, tmp, out = (tmp_path_factory.mktemp(n) for n in ("home", "tmp", "results"))
    env = {k: v for k, v in os.environ.items() if k not in VLLM_ENV}
    # torch inductor's cache (kept on purpose, eval/backends.py) where it is outside the test
    from torch._inductor.runtime.cache_dir_utils import cache_dir

    env.update(HOME=str(home), TMPDIR=str(tmp), TORCHINDUCTOR_CACHE_DIR=cache_dir())
    cmd = [sys.executable, "-m", "eval.run", "--model", str(tiny), "--out", str(out)]
    cmd += ["--data-dir", str(FIXTURES), "--benchmarks", ",".join(BENCHES), "--repeats", str(RUNS)]
    cmd += ["--max-new-tokens", str(SMALL.max_new_tokens), "--max-model-len", str(SMALL.max_model_len)]
    before = shm_files()
    proc = subprocess.run(
        [*cmd, "--no-progress"], cwd=REPO, env=env, capture_output=True, text=True, timeout=540
    )
    shm_left = shm_files() - before
    return {
        "proc": proc,
        "log": proc.stdout + proc.stderr,
        "out": out,
        "home": home,
        "tmp": tmp,
        "shm_left": {f"/dev/shm/{n}" for n in shm_left} - shm_not_ours(),
    }


def samples_of(out: Path) -> dict:
    recs = [json.loads(line) for line in (out / "samples.jsonl").read_text().splitlines()]
    return {(r["benchmark"], r["question_id"], r["repeat"]): r for r in recs}


def test_default_backend_is_vllm_and_one_engine_serves_every_benchmark_and_repeat(vllm_run, tiny, grader):
    proc, log, out = vllm_run["proc"], vllm_run["log"], vllm_run["out"]
    assert proc.returncode == 0, log[-6000:]
    # one engine for the three benchmarks and both repeats: eval.run's own line, and vLLM's
    assert log.count("[eval] backend vllm loaded in") == 1, log[-6000:]
    assert log.count("Initializing a V1 LLM engine") == 1
    # the CPU defaults reached the engine (vLLM logs the arguments that differ from its defaults)
    engine_args = next(line for line in log.splitlines() if "non-default args:" in line)
    for arg in (
        "'kv_cache_memory_bytes': 536870912",
        "'max_num_batched_tokens': 1024",
        "'enforce_eager': True",
    ):
        assert arg in engine_args, engine_args
    assert "'dtype': 'float32'" in engine_args and "gpu_memory_utilization" not in engine_args
    # --no-progress: no bar at all, loading the weights included (vLLM's "Loading safetensors
    # checkpoint shards" and "Processed prompts" were shown)
    assert "%|" not in log and "it/s]" not in log, log[-6000:]

    summary = json.loads((out / "summary.json").read_text())
    assert summary["complete"] and summary["settings"]["backend"] == "vllm"
    samples = samples_of(out)
    assert len(samples) == 13 * RUNS and {k[0] for k in samples} == set(BENCHES)
    assert {k[2] for k in samples} == set(range(RUNS))
    assert all(r["finish"] in ("stop", "length") and 0 < r["tokens"] <= 24 for r in samples.values())
    # greedy repeats of one engine agree (the table's std is 0)
    same = [samples[(b, q, 0)]["response"] == samples[(b, q, 1)]["response"] for b, q, r in samples if r == 0]
    assert all(same)
    assert summary["per_question_average"]["accuracy"]["std"] == 0.0

    # finished: evaluating again (in this process) starts no engine and generates nothing
    again = eval_run.evaluate(
        tiny, out, BENCHES, data_dir=FIXTURES, decoding=SMALL, runs=RUNS, grader=grader, quiet=True
    )
    assert again == summary
    runs = [json.loads(line) for line in (out / "runs.jsonl").read_text().splitlines()]
    assert [r["generated"] for r in runs] == [13 * RUNS, 0]  # nothing to generate: no backend built


def parting_points(model: Path, out: Path, v: dict, h: dict) -> dict:
    """{sample key: (first differing token, its gap under vLLM's token, under transformers')} for the
    samples whose responses differ (greedy_check.first_differences; None: one stopped short).
    Responses are re-encoded, end token appended when they stopped; each must re-encode to as many
    tokens as were generated, so that these are the tokens the decoder chose."""
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(str(model))
    template = json.loads((out / "summary.json").read_text())["settings"]["template"]
    keys = [k for k in v if v[k]["response"] != h[k]["response"]]
    triples = []
    for k in keys:
        q = next(q for q in bm.load(k[0], FIXTURES).questions if q.id == k[1])
        prompt = prompt_token_ids(template, q.problem, tok)
        assert prompt_sha(prompt) == v[k]["prompt_sha"], k
        pair = []
        for r in (v[k], h[k]):
            ids = tok.encode(r["response"], add_special_tokens=False)
            ids += [tok.eos_token_id] if r["finish"] == "stop" else []
            assert len(ids) == r["tokens"], (k, r, ids)
            pair.append(ids)
        triples.append((prompt, *pair))
    return dict(zip(keys, first_differences(model, triples), strict=True))


def test_greedy_answers_match_the_transformers_backend(vllm_run, tiny, tmp_path, grader):
    """The same prompts through transformers `generate` (float32, like the vLLM engine here): every
    response is the same, or the two part where the model's two best tokens are a near tie under a
    float32 transformers forward (which one wins depends on the CPU's kernels); measured on a
    2-core AVX-512 AMD EPYC: every response identical."""
    assert vllm_run["proc"].returncode == 0, vllm_run["log"][-4000:]
    hf_out = tmp_path / "hf"
    hf = eval_run.evaluate(
        tiny,
        hf_out,
        BENCHES,
        data_dir=FIXTURES,
        decoding=SMALL,
        runs=RUNS,
        backend="hf",
        grader=grader,
        progress=False,
        quiet=True,
    )
    v, h = samples_of(vllm_run["out"]), samples_of(hf_out)
    assert v.keys() == h.keys()
    assert all(v[k]["prompt_sha"] == h[k]["prompt_sha"] for k in v)  # the very same prompt tokens
    # the same text is the same generation: as many tokens, ended the same way
    same = [k for k in v if v[k]["response"] == h[k]["response"]]
    assert all((v[k]["tokens"], v[k]["finish"]) == (h[k]["tokens"], h[k]["finish"]) for k in same)
    parted = parting_points(tiny, vllm_run["out"], v, h)
    ties = {k: p for k, p in parted.items() if p is not None and max(p[1:]) <= NEAR_TIE_NATS}
    diffs = {k: (p, v[k]["response"], h[k]["response"]) for k, p in parted.items() if k not in ties}
    assert diffs == {}, diffs
    assert len({v[k]["pred"] for k in v}) >= 4  # varied answers: agreement is not trivial
    if all(v[k]["pred"] == h[k]["pred"] for k in v):
        vs = json.loads((vllm_run["out"] / "summary.json").read_text())
        for name in BENCHES:
            assert vs["benchmarks"][name]["accuracy"] == hf["benchmarks"][name]["accuracy"]


def test_nothing_is_left_in_home_tmp_or_shm(vllm_run):
    assert vllm_run["proc"].returncode == 0, vllm_run["log"][-4000:]
    home = sorted(str(p.relative_to(vllm_run["home"])) for p in vllm_run["home"].rglob("*"))
    assert home == [], home  # no ~/.cache/vllm, no ~/.config/vllm/usage_stats.json
    # vLLM's IPC sockets removed (its cache is in $RECIPES_CACHE/vllm, outside HOME); torch
    # inductor's folder, if vLLM made one, is torch's own cache
    tmp = sorted(
        str(p.relative_to(vllm_run["tmp"]))
        for p in vllm_run["tmp"].rglob("*")
        if not p.relative_to(vllm_run["tmp"]).parts[0].startswith("torchinductor_")
    )
    assert tmp == [], tmp
    assert vllm_run["shm_left"] == set()
    # vLLM's cache (what it learnt of the model's class) is kept in the project's cache for next time
    assert list((Path(os.environ["RECIPES_CACHE"]) / "vllm" / "modelinfos").glob("*.json"))
