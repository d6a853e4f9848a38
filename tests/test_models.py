"""Local model builders (recipes/tools/models.py): the tiny Qwen2 (random init + warm start) and the SmolLM2
GGUF conversion.

Only two builds run the full warm start (the module's `tiny_dir` and the fresh-process CLI build,
which run side by side); the plumbing tests build with `QUICK` warm-start steps."""

import hashlib
import json
import os
import re
import subprocess
import sys
import unicodedata
from pathlib import Path

import pytest
import torch
from transformers import AutoConfig, AutoModelForCausalLM, AutoTokenizer

from recipes.tools import models
from recipes.tools.data import TOY_N_TEST, TOY_N_TRAIN, TOY_SEED, make_prompt, toy_arithmetic_pairs

QUICK = 20  # warm-start steps of the plumbing tests' builds (the real build: WARM_START["steps"])
REPO = Path(__file__).resolve().parents[1]

# Round-trip cases: LaTeX, digit runs, whitespace runs/CRLF/tabs, emoji, CJK, zero-width space,
# literal special-token strings, apostrophes (Qwen2's split special-cases 's 't ...), empty.
HOSTILE = [
    "",
    "What is 7 + 5? The answer is $\\boxed{12}$.",
    "\\frac{-b \\pm \\sqrt{b^2-4ac}}{2a} \\left(\\int_0^{\\infty} e^{-x^2}\\,dx\\right) 0.000123e-45",
    "12345678901234567890 ,  .  ?  !!  ...\t\ttabs\r\nCRLF\n\n\n   trailing   ",
    "Héllo wörld 😀👍🏽 日本語の数学 ∑∫√∞ ≤≥≠ \u200b zero-width",
    "<|im_start|>user\nhi<|im_end|>\n<|endoftext|> <|im_end|>x<|im_start|>",
    "It's they'RE we'll I'd don't",
    " leading space",
    "\x00\x01 control \x7f",
]


def _digests(path: Path) -> dict[str, str]:
    """sha256 of every file the build wrote, except the stamp (it records the build time)."""
    return {
        f.name: hashlib.sha256(f.read_bytes()).hexdigest()
        for f in sorted(path.iterdir())
        if f.name != models.STAMP
    }


@pytest.fixture(scope="module")
def tiny_dir(tiny_model) -> Path:
    """The real build (seed 0, the full warm start), shared by the session (tests/conftest.py)."""
    return tiny_model


@pytest.fixture(scope="module")
def tiny_tok(tiny_dir):
    return AutoTokenizer.from_pretrained(tiny_dir)


@pytest.fixture
def quick(monkeypatch):
    """Builds through ensure_model/build_model/main use QUICK warm-start steps."""
    monkeypatch.setitem(models.WARM_START, "steps", QUICK)


def test_tiny_is_deterministic_from_seed(tiny_dir, tmp_path):
    """Same seed and steps: the same files (the full build is compared across processes by the CLI
    test); the seed changes the weights, not the tokenizer; the warm start changes the weights."""
    d0 = _digests(tiny_dir)
    assert {"model.safetensors", "tokenizer.json", "config.json", "tokenizer_config.json"} <= d0.keys()
    q0 = _digests(models.build_tiny(tmp_path / "a", seed=0, warm_start_steps=QUICK))
    assert _digests(models.build_tiny(tmp_path / "b", seed=0, warm_start_steps=QUICK)) == q0
    q1 = _digests(models.build_tiny(tmp_path / "seed1", seed=1, warm_start_steps=QUICK))
    bare = _digests(models.build_tiny(tmp_path / "bare", seed=0, warm_start_steps=0))
    weights = [d["model.safetensors"] for d in (d0, q0, q1, bare)]
    assert len(set(weights)) == 4
    assert q1["tokenizer.json"] == q0["tokenizer.json"] == d0["tokenizer.json"] == bare["tokenizer.json"]
    assert models.is_complete(tmp_path / "a", {"seed": 0, "warm_start_steps": QUICK})
    assert models.is_complete(
        tiny_dir,
        {"recipe_version": models.RECIPE_VERSION["tiny"], "warm_start_steps": models.WARM_START["steps"]},
    )


def test_answer_logits_match_the_full_forward():
    """The warm start's shortcut (LM head only at the answer positions) computes what the model does."""
    from transformers import Qwen2Config, Qwen2ForCausalLM

    config = Qwen2Config(
        vocab_size=50, hidden_size=32, num_hidden_layers=3, num_attention_heads=4, num_key_value_heads=2,
        intermediate_size=48, tie_word_embeddings=True,
    )  # fmt: skip
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(0)
        model = Qwen2ForCausalLM(config).eval()
        ids = torch.randint(0, 50, (3, 17))
    qpos = torch.tensor([[0, 1, 2], [7, 12, 16], [14, 15, 16]])
    with torch.no_grad():
        full = model(input_ids=ids).logits
        fast = models.answer_logits(model, ids, qpos)
    torch.testing.assert_close(fast, full.gather(1, qpos[..., None].expand(-1, -1, 50)), rtol=1e-5, atol=1e-5)


def test_warm_start_examples_are_chat_formatted_train_questions(tiny_tok):
    seqs, n_prompt = models.warm_start_examples(tiny_tok)
    train, test = toy_arithmetic_pairs(TOY_N_TRAIN, TOY_N_TEST, TOY_SEED)
    assert len(seqs) == len(n_prompt) == len(train)
    test_questions = {q for q, _ in test}
    for (question, answer), ids, n in zip(train, seqs, n_prompt, strict=True):
        assert question not in test_questions
        prompt = tiny_tok.apply_chat_template(
            make_prompt(question), add_generation_prompt=True, tokenize=False
        )
        assert tiny_tok.decode(ids[:n]) == prompt  # exactly what the rollout is given
        assert tiny_tok.decode(ids[n:]) == f"The answer is \\boxed{{{answer}}}.<|im_end|>"


def _boxed(text: str) -> str | None:
    found = re.findall(r"\\boxed\{([^{}]*)\}", text)
    return found[-1].strip() if found else None


def test_tiny_gets_some_but_not_all_toy_questions_right(tiny_dir, tiny_tok):
    """The warm start's purpose: GRPO needs groups with both right and wrong answers. Greedy accuracy
    on toy test questions (never trained on) lies in a band, and sampling at temperature 1 gives
    mixed groups of 8. Loaded as the trainer loads it (sdpa, float32; stops at <|im_end|>)."""
    model = AutoModelForCausalLM.from_pretrained(tiny_dir, attn_implementation="sdpa")
    _, test = toy_arithmetic_pairs(TOY_N_TRAIN, TOY_N_TEST, TOY_SEED)
    test = test[:50]
    prompts = [
        tiny_tok.apply_chat_template(make_prompt(q), add_generation_prompt=True, tokenize=False)
        for q, _ in test
    ]

    def generate(texts, **kw):
        enc = tiny_tok(texts, return_tensors="pt", padding=True, padding_side="left")
        with torch.no_grad():
            out = model.generate(**enc, max_new_tokens=32, **kw)
        return tiny_tok.batch_decode(out[:, enc["input_ids"].shape[1] :], skip_special_tokens=True)

    greedy = generate(prompts, do_sample=False)
    assert all(re.fullmatch(r"The answer is \\boxed\{\d+\}\.", g) for g in greedy), greedy
    accuracy = sum(_boxed(g) == a for g, (_, a) in zip(greedy, test, strict=True)) / len(test)
    assert 0.05 <= accuracy <= 0.8, accuracy

    n = 20
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(0)
        samples = generate(
            [p for p in prompts[:n] for _ in range(8)], do_sample=True, temperature=1.0, top_k=0, top_p=1.0
        )
    right = [sum(_boxed(s) == test[i][1] for s in samples[8 * i : 8 * i + 8]) for i in range(n)]
    assert sum(0 < r < 8 for r in right) >= 1, right  # seed 0: 9 of 20 mixed (greedy: 8 of 50 right)


@pytest.fixture(scope="module", autouse=True)
def cli_run(tmp_path_factory):
    """`python -m recipes.tools.models tiny` in a fresh interpreter, started before this module's first
    test so that its ~6 s of importing torch overlaps them; `test_cli_*` waits for it."""
    cache = tmp_path_factory.mktemp("cli_cache")
    proc = subprocess.Popen(
        [sys.executable, "-m", "recipes.tools.models", "tiny"],
        cwd=REPO, env={**os.environ, "RECIPES_CACHE": str(cache)},
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    yield proc, cache
    proc.kill()
    proc.wait()


def test_cli_out_seed_force(tmp_path, capsys, quick):
    out = tmp_path / "m"
    models.main(["tiny", "--out", str(out), "--seed", "3"])
    assert capsys.readouterr().out.strip() == str(out)
    first = (out / models.STAMP).stat().st_mtime_ns
    models.main(["tiny", "--out", str(out), "--seed", "3"])
    assert (out / models.STAMP).stat().st_mtime_ns == first
    models.main(["tiny", "--out", str(out), "--seed", "3", "--force"])
    assert (out / models.STAMP).stat().st_mtime_ns != first
    with pytest.raises(SystemExit):
        models.main(["gpt5"])


def test_tiny_loads_with_auto_classes_and_generates(tiny_dir, tiny_tok):
    config = AutoConfig.from_pretrained(tiny_dir)
    assert config.model_type == "qwen2" and config.tie_word_embeddings
    assert (config.hidden_size, config.num_hidden_layers, config.num_attention_heads) == (64, 2, 2)
    assert config.num_key_value_heads == 1 and config.max_position_embeddings == 2048
    assert config.hidden_size // config.num_attention_heads == 32  # vLLM's CPU attention: 32..512
    assert config.vocab_size == len(tiny_tok) == models.TINY_VOCAB_SIZE
    model = AutoModelForCausalLM.from_pretrained(tiny_dir, attn_implementation="sdpa")
    assert model.config._attn_implementation == "sdpa" and model.dtype == torch.float32
    im_end = tiny_tok.convert_tokens_to_ids("<|im_end|>")
    assert tiny_tok.eos_token_id == model.generation_config.eos_token_id == config.eos_token_id == im_end
    assert tiny_tok.pad_token == "<|endoftext|>" and tiny_tok.bos_token is None

    # a batch padded on the left by hand (apply_chat_template(padding_side="left") padded on the
    # right, and generate() continued the short prompt after its pads)
    questions = ("What is 7 + 5?", "1+1")
    prompts = [
        tiny_tok.apply_chat_template([{"role": "user", "content": q}], add_generation_prompt=True)[
            "input_ids"
        ]
        for q in questions
    ]
    width = max(map(len, prompts))
    ids = torch.tensor([[tiny_tok.pad_token_id] * (width - len(p)) + p for p in prompts])
    mask = torch.tensor([[0] * (width - len(p)) + [1] * len(p) for p in prompts])
    out = model.generate(input_ids=ids, attention_mask=mask, max_new_tokens=8, do_sample=False)
    # the independent value: greedy decoding by hand, a full forward per token (no KV cache), the
    # positions counted from each row's first real token, pads after a row's end of sequence
    expected, done = ids, torch.zeros(2, dtype=torch.bool)
    with torch.no_grad():
        while not done.all() and expected.shape[1] < width + 8:
            attention = torch.cat([mask, torch.ones(2, expected.shape[1] - width, dtype=mask.dtype)], 1)
            logits = model(
                input_ids=expected,
                attention_mask=attention,
                position_ids=(attention.cumsum(1) - 1).clamp(min=0),
            ).logits[:, -1]
            token = torch.where(done, tiny_tok.pad_token_id, logits.argmax(-1))
            done |= token == im_end
            expected = torch.cat([expected, token[:, None]], 1)
    assert out.tolist() == expected.tolist()
    for row, prompt, question in zip(out.tolist(), prompts, questions, strict=True):
        pads = width - len(prompt)  # each prompt intact after its pads
        assert tiny_tok.decode(row[:width]) == "<|endoftext|>" * pads + (
            f"<|im_start|>user\n{question}<|im_end|>\n<|im_start|>assistant\n"
        )


def test_tiny_chat_template_is_chatml(tiny_tok):
    messages = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "What is 7 + 5?"}]
    rendered = tiny_tok.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)
    assert rendered == (
        "<|im_start|>system\nBe brief.<|im_end|>\n"
        "<|im_start|>user\nWhat is 7 + 5?<|im_end|>\n"
        "<|im_start|>assistant\n"
    )
    turn = [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "12"}]
    assert tiny_tok.apply_chat_template(turn, tokenize=False) == (
        "<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\n12<|im_end|>\n"
    )
    ids = tiny_tok.apply_chat_template(messages, add_generation_prompt=True, return_dict=True)["input_ids"]
    assert ids[0] == tiny_tok.convert_tokens_to_ids("<|im_start|>")  # a single special token
    with pytest.raises(Exception, match="Unsupported role"):
        tiny_tok.apply_chat_template([{"role": "tool", "content": "x"}], tokenize=False)


@pytest.mark.parametrize("text", HOSTILE)
def test_tiny_tokenizer_round_trip(tiny_tok, text):
    assert tiny_tok.decode(tiny_tok.encode(text)) == text


def test_tiny_tokenizer_normalizes_to_nfc_and_splits_digits(tiny_tok):
    """Like Qwen2: NFC-normalizes (decomposed accents come back composed) and one token per digit."""
    decomposed = "cafe\u0301 = 12"
    assert tiny_tok.decode(tiny_tok.encode(decomposed)) == unicodedata.normalize("NFC", decomposed)
    assert tiny_tok.tokenize("12345") == list("12345")


def test_ensure_model_is_idempotent(tmp_path, monkeypatch, quick):
    monkeypatch.setenv("RECIPES_CACHE", str(tmp_path))
    path = models.ensure_model("tiny")
    assert path == tmp_path / "models" / "tiny" and models.is_complete(path)
    mtimes = {f.name: f.stat().st_mtime_ns for f in path.iterdir()}

    def no_rebuild(*a, **k):
        raise AssertionError("rebuilt a complete model")

    monkeypatch.setattr(models, "build_tiny", no_rebuild)
    assert models.ensure_model("tiny", cache_dir=tmp_path) == path
    assert {f.name: f.stat().st_mtime_ns for f in path.iterdir()} == mtimes
    with pytest.raises(ValueError, match="unknown model"):
        models.ensure_model("gpt5", cache_dir=tmp_path)


def test_ensure_model_redoes_a_half_finished_build(tmp_path, quick):
    path = tmp_path / "models" / "tiny"
    path.mkdir(parents=True)
    (path / "config.json").write_text("{}")  # what an interrupted, stamp-less build could leave
    (tmp_path / "models" / ".tiny.tmp-killed").mkdir()  # a killed build's temporary folder
    assert models.ensure_model("tiny", cache_dir=tmp_path) == path
    reference = _digests(models.build_tiny(tmp_path / "ref", seed=0, warm_start_steps=QUICK))
    assert models.is_complete(path) and _digests(path) == reference
    assert not (tmp_path / "models" / ".tiny.tmp-killed").exists()


def test_ensure_model_rebuilds_an_older_recipe(tmp_path, quick):
    """A cached build from an older recipe (version 1: no warm start) or other warm-start steps is redone."""
    path = models.ensure_model("tiny", cache_dir=tmp_path)
    stamp = json.loads((path / models.STAMP).read_text())
    assert stamp["recipe_version"] == models.RECIPE_VERSION["tiny"] and stamp["warm_start_steps"] == QUICK
    for old in ({"recipe_version": 1}, {"warm_start_steps": QUICK + 1}):
        (path / models.STAMP).write_text(json.dumps({**stamp, **old}))
        models.ensure_model("tiny", cache_dir=tmp_path)
        assert (
            json.loads((path / models.STAMP).read_text())["recipe_version"] == models.RECIPE_VERSION["tiny"]
        )
        assert models.is_complete(path, models._spec("tiny", 0))


def test_failed_build_leaves_nothing(tmp_path, monkeypatch):
    def boom():
        raise RuntimeError("interrupted")

    monkeypatch.setattr(models, "tiny_tokenizer", boom)
    with pytest.raises(RuntimeError, match="interrupted"):
        models.ensure_model("tiny", cache_dir=tmp_path)
    assert [p.name for p in (tmp_path / "models").iterdir()] == [".tiny.lock"]


def test_cli_prints_path_and_builds_same_files_in_a_fresh_process(cli_run, tiny_dir):
    """A fresh interpreter (new hash seeds for the tokenizer trainer; the full warm start) writes
    byte-identical files. Last in the module, so the other tests run while it works."""
    proc, cache = cli_run
    out, err = proc.communicate(timeout=300)
    assert proc.returncode == 0, err
    path = Path(out.strip())
    assert path == cache / "models" / "tiny"
    assert models.is_complete(
        path, {"name": "tiny", "seed": 0, "warm_start_steps": models.WARM_START["steps"]}
    )
    assert _digests(path) == _digests(tiny_dir)


@pytest.mark.slow
def test_smollm2_conversion(smollm2_model):
    """The packaged GGUF converted by ensure_model (the session's build, tests/conftest.py)."""
    path = smollm2_model
    tok = AutoTokenizer.from_pretrained(path)
    model = AutoModelForCausalLM.from_pretrained(path, attn_implementation="sdpa")
    assert model.dtype == torch.float32
    assert abs(sum(p.numel() for p in model.parameters()) - 134.5e6) < 0.1e6
    assert tok.eos_token == "<|im_end|>" == tok.convert_ids_to_tokens(model.generation_config.eos_token_id)
    assert tok.pad_token == "<|endoftext|>"
    messages = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "What is 7 + 5?"}]
    rendered = tok.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)
    assert rendered == (
        "<|im_start|>system\nBe brief.<|im_end|>\n"
        "<|im_start|>user\nWhat is 7 + 5?<|im_end|>\n"
        "<|im_start|>assistant\n"
    )
    for text in HOSTILE:
        assert tok.decode(tok.encode(text)) == text
    enc = tok.apply_chat_template(
        messages[1:], add_generation_prompt=True, return_tensors="pt", return_dict=True
    )
    out = model.generate(**enc, max_new_tokens=40, do_sample=False)
    answer = tok.decode(out[0, enc["input_ids"].shape[1] :], skip_special_tokens=True)
    assert "12" in answer, answer
