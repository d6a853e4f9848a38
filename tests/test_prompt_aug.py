"""Prompt augmentation: the 13 templates against the authors' published prompts, rendering through
other chat templates, every format rule, the seeded template draw (reproducible, and at the
requested frequencies), the config checks, and the agent loop's and trainer's helpers."""

import json
import math
import subprocess
import sys
from collections import Counter
from pathlib import Path

import numpy as np
import pytest

from prompt_aug import templates as T
from prompt_aug.sampling import TemplateSampler, make_sampler
from prompt_aug.templates import TemplateError

REPO = Path(__file__).resolve().parent.parent
REFERENCE = json.loads((Path(__file__).parent / "fixtures" / "prompt_aug_reference.json").read_text())[
    "templates"
]
QUESTION = "Let $x^2 = 16$ and $x < 0$. What is $x$?\n(Answer in \\boxed{}.)"


@pytest.fixture(scope="module")
def chatml_tokenizer():
    from recipes.tools.models import tiny_tokenizer

    return tiny_tokenizer()  # the tiny model's ChatML tokenizer, built in a second


# ------------------------------------------------------------------------------- templates
def test_data_file_holds_the_13_published_templates_in_order():
    assert [t["name"] for t in REFERENCE] == list(T.TEMPLATES)
    for ref in REFERENCE:
        t = T.TEMPLATES[ref["name"]]
        assert (t.system, t.user_suffix, t.assistant_prefix) == (
            ref["system"],
            ref["user_suffix"],
            ref["assistant_prefix"],
        )
        assert t.family == ref["category_inferred"]
        assert [list(c) for c in t.rule.checks] == ref["format_rule"]["checks"]
    assert Counter(t.family for t in T.TEMPLATES.values()) == {
        "free-form": 4,
        "deepseek": 4,
        "explicit-cot": 3,
        "reflection": 2,
    }


@pytest.mark.parametrize("ref", REFERENCE, ids=lambda r: r["name"])
def test_chatml_rendering_is_byte_identical_to_the_authors_prompt(ref, chatml_tokenizer):
    expected = ref["rendered_chatml"].replace("{QUESTION}", QUESTION)
    assert T.render_chatml(ref["name"], QUESTION) == expected
    # through a real tokenizer's own ChatML chat template, and back from the token ids
    assert T.render(ref["name"], QUESTION, chatml_tokenizer) == expected
    ids = T.prompt_ids(ref["name"], QUESTION, chatml_tokenizer)
    assert chatml_tokenizer.decode(ids) == expected


# A Qwen2.5-style template: a default system prompt only when the messages bring none.
QWEN_STYLE = (
    "{%- if messages[0]['role'] != 'system' %}<|im_start|>system\nYou are Qwen.<|im_end|>\n{%- endif %}"
    "{%- for m in messages %}{{ '<|im_start|>' + m['role'] + '\n' + m['content'] + '<|im_end|>\n' }}{%- endfor %}"
    "{%- if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{%- endif %}"
)
LLAMA3_STYLE = (
    "{{ bos_token }}{%- for m in messages %}"
    "{{ '<|start_header_id|>' + m['role'] + '<|end_header_id|>\n\n' + m['content'] + '<|eot_id|>' }}"
    "{%- endfor %}{%- if add_generation_prompt %}{{ '<|start_header_id|>assistant<|end_header_id|>\n\n' }}{%- endif %}"
)
GEMMA_STYLE = (
    "{{ bos_token }}{%- for m in messages %}{%- if m['role'] == 'system' %}"
    "{{ raise_exception('System role not supported') }}{%- endif %}"
    "{{ '<start_of_turn>' + m['role'] + '\n' + m['content'] + '<end_of_turn>\n' }}{%- endfor %}"
    "{%- if add_generation_prompt %}{{ '<start_of_turn>model\n' }}{%- endif %}"
)


def _with_template(tokenizer, chat_template, bos="<s>"):
    import copy

    tok = copy.deepcopy(tokenizer)
    tok.chat_template = chat_template
    tok.add_special_tokens({"bos_token": bos})
    return tok


def test_qwen_style_default_system_prompt_is_replaced(chatml_tokenizer):
    tok = _with_template(chatml_tokenizer, QWEN_STYLE)
    for ref in REFERENCE:
        assert T.render(ref["name"], QUESTION, tok) == ref["rendered_chatml"].replace("{QUESTION}", QUESTION)


def test_llama3_style_rendering_is_the_natural_equivalent(chatml_tokenizer):
    tok = _with_template(chatml_tokenizer, LLAMA3_STYLE, bos="<|begin_of_text|>")
    t = T.get("open-r1-teacher")
    expected = (
        "<|begin_of_text|><|start_header_id|>system<|end_header_id|>\n\n" + t.system + "<|eot_id|>"
        "<|start_header_id|>user<|end_header_id|>\n\n" + QUESTION + "<|eot_id|>"
        "<|start_header_id|>assistant<|end_header_id|>\n\n<think>\n"
    )
    assert T.render(t, QUESTION, tok) == expected
    ids = T.prompt_ids(t, QUESTION, tok)
    assert ids.count(tok.bos_token_id) == 1 and ids[0] == tok.bos_token_id  # no second BOS


def test_template_refusing_a_system_turn_gets_it_in_the_user_turn(chatml_tokenizer):
    tok = _with_template(chatml_tokenizer, GEMMA_STYLE)
    t = T.get("simplerl")
    assert T.render(t, QUESTION, tok) == (
        f"<s><start_of_turn>user\n{t.system}\n\n{QUESTION}{t.user_suffix}<end_of_turn>\n<start_of_turn>model\n"
    )


def test_tokenizer_without_chat_template_fails_clearly(chatml_tokenizer):
    tok = _with_template(chatml_tokenizer, None)
    with pytest.raises(TemplateError, match="has no chat template"):
        T.render("abel", QUESTION, tok)


def test_select_by_name_family_and_mix():
    assert T.select("all") == list(T.TEMPLATES)
    assert T.select(["reflection"]) == ["reflective_prompt", "reflective_prompt-teacher"]
    assert T.select(["qwen-math", "deepseek", "open-r1"]) == [
        "qwen-math",
        "open-r1",
        "open-r1-teacher",
        "deepseek-r1",
        "deepseek-r1-teacher",
    ]
    with pytest.raises(TemplateError, match="neither a template nor a family"):
        T.select(["qwen_math"])


# ---------------------------------------------------------------------------- format rules
# One conforming response per template with a rule: the parts each occur exactly once.
CONFORMING = {
    "open-r1": "<think>\nx^2=16, x<0\n</think>\n<answer>\n\\boxed{-4}\n</answer>",
    "open-r1-teacher": "x^2=16, x<0\n</think>\n<answer>\n\\boxed{-4}\n</answer>",
    "deepseek-r1": "<think> x^2=16, x<0 </think> <answer> \\boxed{-4} </answer>",
    "deepseek-r1-teacher": " x^2=16, x<0 </think> <answer> \\boxed{-4} </answer>",
    "lm_eval_prompt1": ": x^2=16 and x<0.\nThe final answer is: \\boxed{-4}",
    "lm_eval_prompt4": "x = -4.\nThe final answer is: \\boxed{-4}",
    "reflective_prompt": "<solution>\nx = -4\n</solution>\n<check>\nLet's verify step by step: 16.\n</check>\n\\boxed{-4}",
    "reflective_prompt-teacher": "x = -4\n</solution>\n<check>\nLet's verify step by step: 16.\n</check>",
}


def test_every_template_with_checks_has_a_conforming_example():
    assert set(CONFORMING) == {n for n, t in T.TEMPLATES.items() if t.rule.checks}


@pytest.mark.parametrize("name", sorted(CONFORMING))
def test_format_rule_scores_conforming_missing_and_repeated_parts(name):
    rule = T.get(name).rule
    response = CONFORMING[name]
    assert rule.score(response) == pytest.approx(1.0)
    for part, weight in rule.checks:
        core = part.strip("\n")  # the tag itself; its newlines may be shared with a neighbour
        missing = response.replace(core, "", 1)
        assert rule.score(missing) == pytest.approx(1.0 - weight), (part, missing)
        repeated = response + "\n" + part
        assert rule.score(repeated) == pytest.approx(1.0 - weight), (part, repeated)
    assert rule.score("\\boxed{-4}") == 0.0


@pytest.mark.parametrize("name", [n for n, t in T.TEMPLATES.items() if not t.rule.checks])
def test_template_without_checks_always_earns_one(name):
    for response in ("", "\\boxed{-4}", "<think></think><think>"):
        assert T.format_score(name, response) == 1.0


def test_training_reward_adds_weighted_format_score_to_accuracy(grader):
    from rewards.training import training_reward

    def reward(response: str, weight: float = 1.0) -> dict:
        grade = grader.grade(response, "-4")
        return training_reward(grade, T.format_score("open-r1", response), 0.0, weight)

    ok = reward(CONFORMING["open-r1"])
    assert (ok["acc"], ok["format_score"], ok["score"]) == (1.0, 1.0, 2.0)
    half = reward(CONFORMING["open-r1"].replace("<answer>", ""), 0.5)
    assert half["format_score"] == pytest.approx(0.75) and half["score"] == pytest.approx(1.0 + 0.5 * 0.75)
    assert reward(CONFORMING["open-r1"], 0.0)["score"] == 1.0  # the no-format ablation
    with pytest.raises(TemplateError, match="unknown template 'nope'"):
        T.format_score("nope", "x")


# ------------------------------------------------------------------------------- sampling
def reference_choose(names, weights, seed, epoch, row, rollout, per_rollout):
    """The documented draw, written out: u from numpy's seeded generator, then the first template
    whose cumulative probability exceeds u."""
    u = np.random.default_rng([seed, epoch, row, rollout if per_rollout else 0]).random()
    total, acc = sum(weights), 0.0
    for name, w in zip(names, weights, strict=True):
        acc += w / total
        if u < acc:
            return name
    return names[-1]


@pytest.mark.parametrize("per_rollout", [False, True])
def test_choice_matches_the_reference_draw(per_rollout):
    weights = {"abel": 3.0, "open-r1": 0.5, "formal": 2.0}
    s = make_sampler(
        templates=["abel", "open-r1", "formal", "reflection"],
        weights=weights,
        seed=7,
        sampling="per_rollout" if per_rollout else "per_prompt",
    )
    names = ["abel", "open-r1", "formal", "reflective_prompt", "reflective_prompt-teacher"]
    w = [3.0, 0.5, 2.0, 1.0, 1.0]
    rng = np.random.default_rng(0)
    for epoch, row, rollout in rng.integers(0, 10_000, size=(500, 3)).tolist():
        assert s.choose(epoch, row, rollout) == reference_choose(
            names, w, 7, epoch, row, rollout, per_rollout
        )


def test_per_prompt_groups_share_a_template_and_per_rollout_groups_mix():
    pp = make_sampler(sampling="per_prompt", seed=1)
    pr = make_sampler(sampling="per_rollout", seed=1)
    for row in range(50):
        assert len({pp.choose(0, row, r) for r in range(8)}) == 1
    assert sum(len({pr.choose(0, row, r) for r in range(8)}) > 1 for row in range(50)) >= 48


def test_epochs_and_seeds_change_the_draw():
    s = make_sampler(seed=3)
    same_epoch = sum(s.choose(0, row, 0) == s.choose(1, row, 0) for row in range(200))
    assert same_epoch < 50  # 1/13 expected to agree by chance
    other = make_sampler(seed=4)
    assert sum(s.choose(0, row, 0) == other.choose(0, row, 0) for row in range(200)) < 50


def test_choice_is_reproducible_in_a_fresh_interpreter():
    """A restarted run is a new process: it must draw exactly what this one draws."""
    code = (
        "from prompt_aug.sampling import make_sampler\n"
        "s = make_sampler(sampling='per_rollout', seed=11, weights={'abel': 4})\n"
        "print(','.join(s.choose(e, r, k) for e in range(3) for r in range(20) for k in range(4)))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, check=True)
    s = make_sampler(sampling="per_rollout", seed=11, weights={"abel": 4})
    here = [s.choose(e, r, k) for e in range(3) for r in range(20) for k in range(4)]
    assert out.stdout.strip().split(",") == here


def chi2_pvalue(counts, probs):
    """Pearson's chi-square goodness of fit, p-value by the Wilson-Hilferty approximation."""
    n = sum(counts)
    stat = sum((c - n * p) ** 2 / (n * p) for c, p in zip(counts, probs, strict=True))
    k = len(counts) - 1
    z = ((stat / k) ** (1 / 3) - (1 - 2 / (9 * k))) / math.sqrt(2 / (9 * k))
    return 0.5 * math.erfc(z / math.sqrt(2))


def test_frequencies_match_the_requested_weights():
    weights = {"abel": 1.0, "qwen-math": 2.0, "open-r1": 4.0, "deepseek-r1": 0.5, "formal": 2.5}
    s = make_sampler(templates=list(weights), weights=weights, seed=2024, sampling="per_rollout")
    draws = Counter(s.choose(e, r, k) for e in range(4) for r in range(1250) for k in range(4))
    counts = [draws[n] for n in s.names]
    assert chi2_pvalue(counts, s.probs) > 1e-3, (counts, s.probs)
    # the test has power: the same counts reject uniform weights and a swapped pair
    assert chi2_pvalue(counts, [1 / 5] * 5) < 1e-9
    swapped = list(s.probs)
    swapped[0], swapped[1] = swapped[1], swapped[0]
    assert chi2_pvalue(counts, swapped) < 1e-9
    zero = make_sampler(templates=["abel", "formal"], weights={"abel": 0}, seed=1)
    assert {zero.choose(0, r, 0) for r in range(100)} == {"formal"}


@pytest.mark.parametrize(
    "settings, match",
    [
        ({"sampling": "per_group"}, "sampling='per_group'"),
        ({"templates": ["abel", "nope"]}, "'nope' is neither"),
        ({"templates": ["abel"], "weights": {"formal": 1}}, "not among the selected"),
        ({"weights": {"abel": -1}}, "abel=-1"),
        ({"templates": ["abel"], "weights": {"abel": 0}}, "weight 0"),
        ({"seed": -3}, "seed=-3"),
        ({"val_template": "qwen"}, "unknown template 'qwen'"),
    ],
)
def test_bad_settings_fail_clearly(settings, match):
    with pytest.raises(TemplateError, match=match):
        make_sampler(**settings)


# ------------------------------------------------------------------- agent loop and trainer
def test_agent_loop_choice_for_training_and_validation_rows():
    from recipes.extensions.agent_loop import question_of
    from recipes.methods.base import Prompt
    from recipes.methods.prompt_aug import PromptAugPrompts, PromptAugSettings, choose_template

    s = TemplateSampler(("abel", "formal"), (0.5, 0.5), per_rollout=True, seed=5, val_template="qwen-math")
    row = {"index": 17, "session_id": 3, "recipes_epoch": 2, "extra_info": {"question": "Q?"}}
    assert choose_template(s, row, training=True) == s.choose(2, 17, 3)
    val_row = {"index": 17, "session_id": 3, "extra_info": {"question": "Q?"}}
    assert choose_template(s, val_row, training=False) == "qwen-math"
    assert question_of(row) == "Q?"
    # the agent loop's hook: a training row's template is named in extra_fields, a validation row's not
    hook = PromptAugPrompts(PromptAugSettings(templates=["abel", "formal"], sampling="per_rollout", seed=5))
    train, val = Prompt("Q?", "Q?"), Prompt("Q?", "Q?")
    hook(train, row, True, 8)
    hook(val, val_row, False, 8)
    assert train.template == train.extra["template"] == s.choose(2, 17, 3) and train.question == "Q?"
    assert val.template == "qwen-math" and val.extra == {}
    with pytest.raises(KeyError, match="row 4 of data source 'math' has no extra_info.question"):
        question_of({"index": 4, "data_source": "math", "extra_info": {"index": 4}})


def test_template_metrics_by_hand():
    from recipes.methods.prompt_aug import template_metrics

    templates = ["abel", "open-r1", "abel", None, "open-r1", "abel"]
    infos = [
        {"acc": 1.0, "format_score": 1.0},
        {"acc": 0.0, "format_score": 0.5},
        {"acc": 0.0, "format_score": 1.0},
        {"acc": 1.0, "format_score": 0.0},
        {"acc": 1.0, "format_score": 0.25},
        {"acc": 1.0, "format_score": 1.0},
    ]
    out = template_metrics(templates, infos, [10, 20, 30, 99, 40, 50])
    assert out == {
        "template/abel/samples": 3.0,
        "template/abel/acc": pytest.approx(2 / 3),
        "template/abel/format_score": 1.0,
        "template/abel/response_length": 30.0,
        "template/open-r1/samples": 2.0,
        "template/open-r1/acc": 0.5,
        "template/open-r1/format_score": 0.375,
        "template/open-r1/response_length": 30.0,
    }


# ---------------------------------------------------------------------------------- CLI
def _cli(*args):
    return subprocess.run(
        [sys.executable, "-m", "prompt_aug.templates", *args], cwd=REPO, capture_output=True, text=True
    )


@pytest.mark.slow  # a fresh interpreter (or several) importing verl
def test_cli_list_and_show():
    listed = _cli("list")
    assert listed.returncode == 0
    lines = listed.stdout.splitlines()
    assert len(lines) == 13 and lines[0].split()[:3] == ["1", "abel", "free-form"]
    assert "0.25*once('<think>\\n')" in lines[3]
    for ref in REFERENCE:
        shown = _cli("show", ref["name"], "--question", QUESTION, "--chatml")
        assert shown.returncode == 0
        assert shown.stdout == ref["rendered_chatml"].replace("{QUESTION}", QUESTION)  # byte for byte


@pytest.mark.slow  # a fresh interpreter (or several) importing verl
def test_cli_errors(tmp_path, chatml_tokenizer):
    unknown = _cli("show", "qwen", "--question", "1+1", "--chatml")
    assert unknown.returncode == 2 and "unknown template 'qwen'" in unknown.stderr
    assert _cli("show", "abel", "--question", "1+1").returncode == 2  # neither --chatml nor --tokenizer
    tok = _with_template(chatml_tokenizer, None)
    tok.save_pretrained(tmp_path / "tok")
    (tmp_path / "tok" / "chat_template.jinja").unlink(missing_ok=True)
    plain = _cli("show", "abel", "--question", "1+1", "--tokenizer", str(tmp_path / "tok"))
    assert plain.returncode == 2 and "has no chat template" in plain.stderr
    chatml_tokenizer.save_pretrained(tmp_path / "chatml")
    via_tok = _cli("show", "abel", "--question", "1+1", "--tokenizer", str(tmp_path / "chatml"))
    assert via_tok.stdout == T.render_chatml("abel", "1+1")
