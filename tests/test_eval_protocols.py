"""Each paper's evaluation protocol as one flag (recipes/protocols.py): --help lists the four, each
resolves to its paper's settings, options beside it win and are recorded, a raw-text protocol
builds its prompts without the chat template (and generates from them: the bare tiny model on the
fixture benchmarks, a few tokens), eval.iterate takes the protocol a training run records, the
sbatch scripts pass PROTOCOL on, and recipes.train refuses an unknown recipes.eval_protocol
before Ray starts. No vLLM, no training."""

import argparse
import json
import os
import re
import subprocess
from pathlib import Path

import pytest
import yaml
from omegaconf import OmegaConf
from transformers import AutoTokenizer

from eval import iterate
from eval import run as eval_run
from eval.options import add_eval_arguments, eval_kwargs, protocol_note
from eval.prompts import render_prompt
from eval.request import EvalError, check_template
from eval.results import prompt_sha
from eval.summary import summary_settings
from eval.training_run import apply_run_protocol
from recipes import protocols
from recipes.tools import models

REPO = Path(__file__).resolve().parents[1]
FIXTURES = REPO / "tests" / "fixtures" / "eval"
TA_INSTRUCTION = (  # lhkhiem28/TA-GRPO@09719bf utils.py make_map_fn, character for character
    "You FIRST think about the reasoning process step by step and then provide the user with the answer. "
    "Please enclose your final answer in the box: \\boxed{}. Please stop generating immediately after "
    "outputting the box."
)


@pytest.fixture(scope="module")
def tiny(tmp_path_factory) -> Path:
    """The bare tiny model (no warm start, ~1 s): what it answers does not matter here."""
    return models.build_tiny(tmp_path_factory.mktemp("tiny") / "model", seed=0, warm_start_steps=0)


def kwargs_of(*argv: str) -> dict:
    p = argparse.ArgumentParser()
    add_eval_arguments(p)
    return eval_kwargs(p.parse_args([*argv, "--backend", "hf"]))


def test_help_lists_protocol_with_the_four_papers(capsys, monkeypatch):
    monkeypatch.setenv("COLUMNS", "2000")  # argparse wraps the help to the terminal, at hyphens too
    for main, argv in ((eval_run.main, ["--help"]), (iterate.main, ["--help"])):
        with pytest.raises(SystemExit) as done:
            main(argv)
        assert done.value.code == 0
        text = capsys.readouterr().out
        assert "--protocol {prompt_aug,ta_grpo,cw_grpo,cw_grpo_7b,prorl,none}" in text
        for paper in ("prompt augmentation (Lu", "TA-GRPO (Le", "CW-GRPO (Wang", "ProRL (NVIDIA"):
            assert paper in text
        assert "cw_grpo: CW-GRPO (Wang et al. 2026, arXiv 2605.11538), 1 sample at temperature 0.6" in text


def test_cw_grpo_is_the_authors_lighteval_run():
    kw = kwargs_of("--protocol", "cw_grpo")
    d = kw["decoding"]
    assert (d.mode, d.max_new_tokens, d.max_model_len, d.temperature, d.top_p) == (
        "sample", 32768, 32768, 0.6, 0.95
    )  # fmt: skip
    assert kw["benchmarks"] == ["aime24", "math500", "amc23", "minerva", "olympiadbench"]
    assert (kw["runs"], kw["ks"], kw["template"], kw["grading"], kw["protocol"]) == (
        1, [1], "lighteval-math", "lenient", "cw_grpo"
    )  # fmt: skip
    metric = protocols.PROTOCOLS["cw_grpo"].metric
    assert (metric.name, metric.k, metric.per_question) == ("pass@1", 1, False)
    # the paper's own row averages as the protocol does: table 2, Qwen2.5-Math-7B-Instruct with
    # Clip-Cov, 3/30, 412/500, 23/40, 88/272, 279/675 -> 44.7 average
    counts = {"aime24": (3, 30), "math500": (412, 500), "amc23": (23, 40), "minerva": (88, 272)}
    counts["olympiadbench"] = (279, 675)
    summary = {
        "benchmarks": {
            b: {"complete": True, "accuracy": {"mean": c / n}, "pass_at_k": {"1": c / n}}
            for b, (c, n) in counts.items()
        }
    }
    numbers = protocols.paper_numbers(protocols.PROTOCOLS["cw_grpo"], summary)
    assert list(numbers) == ["average"] and round(100 * numbers["average"], 1) == 44.7
    summary["benchmarks"]["amc23"]["complete"] = False  # an average of four is not the paper's
    assert protocols.paper_numbers(protocols.PROTOCOLS["cw_grpo"], summary) == {"average": None}


def test_each_protocol_resolves_to_its_table_and_no_protocol_is_prompt_augs():
    expected = {  # (benchmarks, template, mode, runs, ks, max new tokens, model length, grading)
        "ta_grpo": (
            ["amc", "olympiadbench", "aime24", "aime25", "minerva", "gpqa_diamond"], "ta-grpo", "sample",
            128, [1, 2, 4, 8, 16, 32], 3072, 8192, "boxed",
        ),
        "prorl": (
            ["aime24", "aime25", "amc", "math500", "minerva", "olympiadbench"], "r1-distill-math",
            "sample", 16, [1], 32768, 32768, "boxed",
        ),
        "prompt_aug": (
            ["aime24", "amc", "math500", "minerva", "olympiadbench"], "qwen-math", "greedy", 5, [], 3000,
            4096, "boxed",
        ),
        "cw_grpo_7b": (  # the authors' 7B evaluation: cw_grpo within the 7B model's 4,096 tokens
            ["aime24", "math500", "amc23", "minerva", "olympiadbench"], "lighteval-math", "sample", 1, [1],
            4096, 4096, "lenient",
        ),
    }  # fmt: skip
    for name, want in expected.items():
        kw = kwargs_of("--protocol", name)
        d = kw["decoding"]
        got = (kw["benchmarks"], kw["template"], d.mode, kw["runs"], kw["ks"], d.max_new_tokens)
        assert (*got, d.max_model_len, kw["grading"]) == want, name
        assert protocol_note(kw) is None  # nothing changed it
    plain = kwargs_of()
    assert plain.pop("protocol") is None and kwargs_of("--protocol", "none").pop("protocol") is None
    pa = kwargs_of("--protocol", "prompt_aug")
    assert pa.pop("protocol") == "prompt_aug" and pa == plain
    # without a protocol the saved settings have no protocol keys: older results still match
    assert "protocol" not in summary_settings("/m", **kwargs_of())
    for p in protocols.PROTOCOLS.values():  # every value has its source
        assert {"benchmarks", "prompt", "decoding", "runs", "max_new_tokens", "max_model_len"} <= set(
            p.sources
        )
        assert {"grading", "metric"} <= set(p.sources) and all(p.sources.values())


def test_options_beside_a_protocol_win_and_are_recorded():
    kw = kwargs_of("--protocol", "cw_grpo", "--max-new-tokens", "4096", "--n", "4")
    d = kw["decoding"]
    assert (d.max_new_tokens, kw["runs"], d.temperature, d.max_model_len) == (4096, 4, 0.6, 32768)
    assert protocol_note(kw) == (
        "note: --protocol cw_grpo with --n 4 (its 1), --max-new-tokens 4096 (its 32768): not the paper's "
        "evaluation (summary.json records it)"
    )
    settings = summary_settings("/m", **kw)
    assert (settings["protocol"], settings["protocol_overrides"]) == ("cw_grpo", ["--n", "--max-new-tokens"])
    # the paper's k as far as fewer samples reach
    assert kwargs_of("--protocol", "ta_grpo", "--n", "16")["ks"] == [1, 2, 4, 8, 16]
    # greedy beside a sampling protocol: greedy's own repeats, and said
    kw = kwargs_of("--protocol", "cw_grpo", "--decoding", "greedy")
    assert (kw["decoding"].mode, kw["runs"], kw["ks"]) == ("greedy", 5, [])
    assert "--decoding greedy (its sample)" in protocol_note(kw)
    with pytest.raises(EvalError, match=r"sampling takes --n \(--protocol cw_grpo samples\)"):
        kwargs_of("--protocol", "cw_grpo", "--repeats", "3")
    assert "--limit 2" in protocol_note(kwargs_of("--protocol", "prorl", "--limit", "2"))


def test_a_raw_text_protocol_prompts_without_the_chat_template(tiny, tmp_path, capsys, grader):
    tok = AutoTokenizer.from_pretrained(str(tiny))
    question = "What is 2 + 3?"
    raw = render_prompt("ta-grpo", question, tok)
    assert raw == TA_INSTRUCTION + "\n" + question  # the text itself: no chat turn markers
    chat = render_prompt("lighteval-math", question, tok)
    assert chat.startswith("<|im_start|>user\nSolve the following math problem efficiently and clearly.  ")
    assert chat.endswith(f"\n\n{question}<|im_end|>\n<|im_start|>assistant\n")
    # and the run generates from exactly that text
    out = tmp_path / "ta"
    kw = kwargs_of(
        *("--protocol", "ta_grpo", "--data-dir", str(FIXTURES), "--benchmarks", "arith", "--limit", "2"),
        *("--n", "2", "--max-new-tokens", "4", "--max-model-len", "512", "--no-progress"),
    )
    eval_run.evaluate(tiny, out, grader=grader, **kw)
    printed = capsys.readouterr()
    records = [json.loads(line) for line in (out / "samples.jsonl").read_text().splitlines()]
    assert len(records) == 2 * 2  # two questions, two samples each
    problems = {
        json.loads(line)["id"]: json.loads(line)["problem"] for line in (FIXTURES / "arith.jsonl").open()
    }
    for r in records:
        text = TA_INSTRUCTION + "\n" + problems[r["question_id"]]
        assert r["prompt_sha"] == prompt_sha(tok.encode(text, add_special_tokens=True))
    summary = json.loads((out / "summary.json").read_text())
    assert summary["settings"]["protocol"] == "ta_grpo" and summary["settings"]["template"] == "ta-grpo"
    assert summary["protocol"]["metric"] == "pass@32" and "--n" in summary["protocol"]["overrides"]
    assert "protocol ta_grpo, TA-GRPO (Le et al. 2026, arXiv 2601.22478): pass@32: " in printed.out


def _run_folder(tmp_path: Path, protocol) -> Path:
    run = tmp_path / "run"
    (run / "checkpoints").mkdir(parents=True)
    config = {"trainer": {"project_name": "p"}, "recipes": {"eval_protocol": protocol}}
    (run / "config.yaml").write_text(yaml.safe_dump(config))
    return run / "checkpoints"


def test_eval_iterate_takes_the_protocol_the_training_run_records(tmp_path, capsys):
    root = _run_folder(tmp_path, "ta_grpo")

    def settings(*extra: str) -> dict:
        args = iterate.parse_args([str(root), *extra])
        apply_run_protocol(args, root)
        return iterate.check_settings(args, iterate.locate(args, root))

    kw = settings()
    said = capsys.readouterr().out
    assert said == (
        f"[iterate] protocol ta_grpo: the training run's recipes.eval_protocol ({root.parent / 'config.yaml'}); "
        "--protocol NAME or --protocol none to evaluate otherwise\n"
    )
    assert (kw["protocol"], kw["runs"], kw["template"], kw["decoding"].max_new_tokens) == (
        "ta_grpo", 128, "ta-grpo", 3072
    )  # fmt: skip
    assert settings("--protocol", "cw_grpo")["protocol"] == "cw_grpo"  # the command line wins
    kw = settings("--protocol", "none")
    assert kw["protocol"] is None and kw["decoding"].max_new_tokens == 3000
    assert capsys.readouterr().out == ""
    # main says it in its one line, then finds no step (exit 2)
    assert iterate.main([str(root), "--backend", "hf"]) == 2
    assert "[iterate] protocol ta_grpo: the training run's" in capsys.readouterr().out
    # a run without the key (older runs) or with null: eval's defaults, nothing said
    for recorded in (None, "absent"):
        root = _run_folder(tmp_path / str(recorded), recorded)
        if recorded == "absent":
            (root.parent / "config.yaml").write_text(yaml.safe_dump({"recipes": {}}))
        assert settings()["protocol"] is None and capsys.readouterr().out == ""
    root = _run_folder(tmp_path / "bad", "cwgrpo")
    assert iterate.main([str(root), "--backend", "hf"]) == 2
    said = capsys.readouterr().err
    assert "records recipes.eval_protocol='cwgrpo', not a protocol (prompt_aug, ta_grpo, cw_grpo, " in said


SBATCH = [REPO / "scripts" / "slurm" / n for n in ("eval_iterative.sbatch", "eval_checkpoint.sbatch")]


@pytest.mark.parametrize("script", SBATCH, ids=lambda p: p.name)
def test_sbatch_passes_protocol_on_and_refuses_a_misspelling(script, tmp_path):
    model = tmp_path / "model"
    model.mkdir()
    (model / "config.json").write_text("{}")
    target = str(tmp_path / "run" / "checkpoints") if "iterative" in script.name else str(model)
    env = {"PATH": os.environ["PATH"], "HOME": str(tmp_path), "DRY_RUN": "1"}

    def run(**extra):
        return subprocess.run(
            ["bash", str(script), target, "--limit", "2"],
            env={**env, **extra},
            capture_output=True,
            text=True,
            timeout=30,
            cwd=REPO,
        )

    proc = run(PROTOCOL="cw_grpo")
    assert proc.returncode == 0, proc.stderr
    last = proc.stdout.strip().splitlines()[-1].split()
    assert last[-4:] == ["--protocol", "cw_grpo", "--limit", "2"]  # before the user's options: theirs win
    assert "--protocol" not in run().stdout
    proc = run(PROTOCOL="cwgrpo")
    assert proc.returncode == 2 and "PROTOCOL=cwgrpo is not an evaluation protocol" in proc.stderr
    listed = re.search(r"^\s+([\w |]+)\) protocol_args=", script.read_text(), re.M)[1]
    assert listed.split(" | ") == [*protocols.PROTOCOLS, protocols.NONE]


def test_recipes_train_refuses_an_unknown_eval_protocol_before_ray():
    from recipes.checks import check_eval_protocol, validate
    from recipes.settings import ConfigError
    from recipes.train import compose

    cfg = compose(["experiment=demo_cpu"])
    OmegaConf.update(cfg, "recipes.eval_protocol", "cwgrpo")
    with pytest.raises(ConfigError) as err:
        validate(cfg)
    assert str(err.value) == (
        "recipes.eval_protocol='cwgrpo' is not an evaluation protocol: choose one of prompt_aug, ta_grpo, "
        "cw_grpo, cw_grpo_7b, prorl (recipes/protocols.py), or null."
    )
    for name in (*protocols.PROTOCOLS, None):
        OmegaConf.update(cfg, "recipes.eval_protocol", name)
        check_eval_protocol(cfg)  # each of the four, and null, passes


def test_the_protocols_name_only_what_eval_knows_and_the_docs_show_the_table():
    from eval.benchmarks import SPECS
    from prompt_aug import templates
    from recipes.tools.data.schema import INSTRUCTION

    taken = {*templates.TEMPLATES, *getattr(templates, "PAPER_TEMPLATES", {}), "none", "raw"}
    assert not taken & set(protocols.PROMPTS)  # a protocol's prompt never changes a template's meaning
    for p in protocols.PROTOCOLS.values():
        assert set(p.benchmarks) <= set(SPECS), p.name
        check_template(p.template)
        assert all(set(group) <= set(p.benchmarks) for _, group in p.metric.groups), p.name
    # ProRL's prompt is the one its preset trains with
    assert protocols.PROMPTS["r1-distill-math"].fill("Q") == "Q" + INSTRUCTION
    docs = (REPO / "docs" / "eval.md").read_text()
    assert protocols.markdown_table() in docs
