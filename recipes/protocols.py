"""Each paper's evaluation protocol under one name, with where every value comes from.

    python -m eval.run --model PATH --protocol cw_grpo
    python -m eval.iterate CHECKPOINT_ROOT --protocol ta_grpo
    PROTOCOL=prorl sbatch scripts/slurm/eval_iterative.sbatch CHECKPOINT_ROOT

A protocol sets the benchmarks, the prompt (a template through the model's chat template, or raw
text), the decoding (greedy repeats or n samples), temperature and top-p, the token limits, the
answer extraction and the metric the paper reports (`PROTOCOLS`; `sources` names the author's file
or the paper's section for every value, `gaps` says where ours cannot be theirs). An option given
beside --protocol wins: the command says so in one line and the results record it
(summary.json: `settings.protocol`, `settings.protocol_overrides`), since what a user typed is what
they meant, and the record keeps such a result apart from the paper's number. `none` is no
protocol (eval's own defaults, which are `prompt_aug`'s). A training run records its preset's
protocol as `recipes.eval_protocol`; eval.iterate on its checkpoints uses it unless --protocol says
otherwise. docs/eval.md#paper-protocols has the same table for readers.

Data only, and it imports nothing of the project: part of the ground, so that eval/ applies a
protocol and recipes/checks.py refuses an unknown `recipes.eval_protocol` before Ray starts, and
neither reaches up into the other.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

NONE = "none"  # --protocol none: no protocol, even for a run that records one


@dataclass(frozen=True)
class PromptFormat:
    """A prompt an author's evaluation builds from a question: `text` with `{question}` in it, as the
    only user turn through the model's chat template (`chat`), or given to the engine as raw text
    (no chat template; then tokenized with the tokenizer's own special tokens, as vLLM tokenizes a
    text prompt: Llama's BOS, nothing for Qwen)."""

    text: str
    chat: bool
    source: str

    def __post_init__(self) -> None:
        if self.text.count("{question}") != 1:
            raise ValueError(f"a prompt format holds {{question}} exactly once: {self.text!r}")

    def fill(self, question: str) -> str:
        # str.replace, not str.format: the texts hold \boxed{} and {ANSWER}
        return self.text.replace("{question}", question)

    def render(self, question: str, tokenizer) -> str:
        text = self.fill(question)
        if not self.chat:
            return text
        messages = [{"role": "user", "content": text}]
        return tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)


# The prompts of the protocols that prompt_aug/ does not have (eval.run's --template takes
# these names too). Texts copied character for character from the files named.
PROMPTS: dict[str, PromptFormat] = {
    "lighteval-math": PromptFormat(
        "Solve the following math problem efficiently and clearly.  The last line of your response "
        "should be of the following format: 'Therefore, the final answer is: $\\boxed{ANSWER}$. I hope "
        "it is correct' (without quotes) where ANSWER is just the final number or expression that "
        "solves the problem. Think step by step before answering.\n\n{question}",
        chat=True,
        source="WangCheng0116/CW-GRPO@4d46a2c src/open_r1/evaluate.py MATH_QUERY_TEMPLATE, the user turn "
        "of lighteval's --use-chat-template (WangCheng0116/CW-GRPO@6e2a849 README.md, '1.5B evaluation'); "
        "no system prompt",
    ),
    "ta-grpo": PromptFormat(
        "You FIRST think about the reasoning process step by step and then provide the user with the "
        "answer. Please enclose your final answer in the box: \\boxed{}. Please stop generating "
        "immediately after outputting the box.\n{question}",
        chat=False,
        source="lhkhiem28/TA-GRPO@09719bf utils.py make_map_fn (the instruction, a newline, the "
        "question); test.py gives that text to vLLM's LLM.generate as it is: no chat template",
    ),
    "r1-distill-math": PromptFormat(
        "{question}\nPlease reason step by step, and put your final answer within \\boxed{}.",
        chat=True,
        source="the ProRL paper gives no prompt: DeepSeek-R1-Distill-Qwen's recommended math prompt "
        "(its model card: the instruction in the user turn, no system prompt), the prompt the ProRL "
        "preset trains with (recipes/tools/data/schema.py INSTRUCTION)",
    ),
}


@dataclass(frozen=True)
class Metric:
    """What the paper reports, read from an eval.run summary: each benchmark's pass@k (k None:
    the accuracy averaged over the greedy repeats, avg@R; k 1: the mean over the samples, which is
    the unbiased pass@1), averaged over the benchmarks of each group as the paper averages them,
    plus the per-question average (all questions pooled) where the paper reports one."""

    name: str  # as the paper writes it
    k: int | None
    groups: tuple[tuple[str, tuple[str, ...]], ...]  # (label, benchmarks) each averaged
    per_question: bool = False
    reported: str = ""  # the paper's numbers this metric reproduces, and where they are


@dataclass(frozen=True)
class Protocol:
    name: str
    paper: str
    benchmarks: tuple[str, ...]  # eval/benchmarks.py names, in the paper's table order
    template: str  # prompt_aug/ name, or a PROMPTS name
    decoding: str  # greedy | sample
    runs: int  # greedy repeats R, or samples per question n
    ks: tuple[int, ...]  # pass@k reported (sampling)
    temperature: float | None  # sampling only
    top_p: float | None
    max_new_tokens: int
    max_model_len: int  # prompt + response; a response gets min(max_new_tokens, this - its prompt)
    grading: str  # boxed | lenient (eval/grading.py)
    metric: Metric
    sources: Mapping[str, str] = field(default_factory=dict)  # setting -> where the value comes from
    gaps: tuple[str, ...] = ()  # where ours is not theirs, and why


PA = "wenquanlu/prompt-augmentation-GRPO@ff1ded4"
CW = "WangCheng0116/CW-GRPO@4d46a2c"
CW_README = "WangCheng0116/CW-GRPO@6e2a849 README.md"  # the commit after 4d46a2c adds only the README
TA = "lhkhiem28/TA-GRPO@09719bf"

PROTOCOLS: dict[str, Protocol] = {
    p.name: p
    for p in (
        Protocol(
            name="prompt_aug",
            paper="prompt augmentation (Lu, Huang, Balestriero 2026, arXiv 2602.03190)",
            benchmarks=("aime24", "amc", "math500", "minerva", "olympiadbench"),
            template="qwen-math",
            decoding="greedy",
            runs=5,
            ks=(),
            temperature=None,
            top_p=None,
            max_new_tokens=3000,
            max_model_len=4096,
            grading="boxed",
            metric=Metric(
                "greedy avg@5",
                k=None,
                groups=(("per-benchmark average", ("aime24", "amc", "math500", "minerva", "olympiadbench")),),
                per_question=True,
                reported="table 2: 45.2 per-benchmark / 50.9 per-question average at step 2720",
            ),
            sources={
                "benchmarks": f"{PA} evaluate_model.py tasks aime, amc, math, minerva, olympiad_bench of "
                "datasets/evaluation_suite (30, 83, 500, 272, 675 rows; ours are public copies of the same sets)",
                "prompt": f"{PA} evaluate_model.py apply_qwen_math_template: ChatML with the system "
                "'Please reason step by step, and put your final answer within \\boxed{}.'; the "
                "qwen-math template renders the same bytes through a Qwen2.5 chat template",
                "decoding": f"{PA} evaluate_model.py: temperature 0, top_p 1 (greedy), n_samples 1",
                "runs": f"{PA} eval/eval_iterative.sh and eval/eval_checkpoint.sh: N_REPEAT=5 runs of "
                "evaluate_model.py per checkpoint",
                "max_new_tokens": f"{PA} evaluate_model.py max_tokens=3000",
                "max_model_len": f"{PA} evaluate_model.py max_model_len=4096",
                "grading": f"{PA} evaluate_model.py boxed_reward_fn: the last \\boxed{{}}",
                "metric": "the paper's table 2: both averages of greedy avg@5 (evaluate_model.py "
                "prints each benchmark and their mean, the per-benchmark average)",
            },
        ),
        Protocol(
            name="ta_grpo",
            paper="TA-GRPO (Le et al. 2026, arXiv 2601.22478)",
            benchmarks=("amc", "olympiadbench", "aime24", "aime25", "minerva", "gpqa_diamond"),
            template="ta-grpo",
            decoding="sample",
            runs=128,
            ks=(1, 2, 4, 8, 16, 32),
            temperature=0.6,
            top_p=0.95,
            max_new_tokens=3072,
            max_model_len=8192,
            grading="boxed",
            metric=Metric(
                "pass@32",
                k=32,
                groups=(
                    ("competition average", ("amc", "olympiadbench", "aime24", "aime25")),
                    ("out-of-distribution average", ("minerva", "gpqa_diamond")),
                ),
                reported="table 1: pass@32 of each benchmark and of both groups; figure 5: pass@k, k 1 to 32",
            ),
            sources={
                "benchmarks": "the paper's section 5.1: AMC, OlympiadBench, AIME24, AIME25 "
                f"(competition) and Minerva, GPQA-Diamond (out of distribution); {TA} eval.sh also runs "
                "their MATH test split, which the paper does not report",
                "prompt": PROMPTS["ta-grpo"].source,
                "decoding": f"{TA} test.py SamplingParams temperature=0.6, top_p=0.95",
                "runs": f"{TA} test.py n=128",
                "ks": "the paper's section 5.1 and appendix D: k up to 32 (test.py prints up to 128)",
                "max_new_tokens": f"{TA} test.py max_tokens=3072",
                "max_model_len": f"{TA} test.py sets none (the model's own length): 8,192 here leaves "
                "every benchmark's prompt all 3,072 new tokens",
                "grading": f"{TA} test.py: verl/utils/reward_score/math_reward.py, the last \\boxed{{}} "
                "compared with math-verify",
                "metric": f"{TA} test.py: the unbiased pass@k of 128 samples, averaged over questions; the "
                "paper averages benchmarks within each group",
            },
            gaps=(
                "Their benchmark copies are the configs AMC12, OlympiadBench, AIME24, AIME25, Minerva and "
                "GPQA of lhkhiem28/TA-GRPO-datasets (test.py); ours are the public copies of "
                "eval/benchmarks.py, not compared with theirs (no hub access where this was written).",
                "Their GPQA rows carry their own choice format; ours letters the shuffled choices and "
                "adds 'Answer with the letter of the correct choice.'",
            ),
        ),
        Protocol(
            name="cw_grpo",
            paper="CW-GRPO (Wang et al. 2026, arXiv 2605.11538)",
            benchmarks=("aime24", "math500", "amc23", "minerva", "olympiadbench"),
            template="lighteval-math",
            decoding="sample",
            runs=1,
            ks=(1,),
            temperature=0.6,
            top_p=0.95,
            max_new_tokens=32768,
            max_model_len=32768,
            grading="lenient",
            metric=Metric(
                "pass@1",
                k=1,
                groups=(("average", ("aime24", "math500", "amc23", "minerva", "olympiadbench")),),
                reported="table 2, DeepSeek-R1-Distill-Qwen-1.5B after 100 steps: GRPO 85.0 on MATH-500 "
                "and 52.6 average, CW-GRPO 55.3 average",
            ),
            sources={
                "benchmarks": f"{CW_README} '1.5B evaluation': tasks aime24, math_500, amc23, minerva, "
                f"olympiadbench; {CW} src/open_r1/evaluate.py loads HuggingFaceH4/aime_2024, "
                "HuggingFaceH4/MATH-500, knoveleng/AMC-23, knoveleng/Minerva-Math, knoveleng/OlympiadBench, "
                "the first source of each of ours",
                "prompt": PROMPTS["lighteval-math"].source,
                "decoding": f"{CW_README}: generation_parameters temperature 0.6, top_p 0.95",
                "runs": "one sample per question: lighteval @ed08481 (the commit "
                f"{CW} pins) generates one sample for a metric whose name has no '@' (extractive_match; "
                "lighteval_task.py extract_num_samples); the paper's table 2 counts one verdict per "
                "question (Clip-Cov: 3/30, 412/500, 23/40)",
                "max_new_tokens": f"{CW_README}: max_new_tokens 32768; {CW} src/open_r1/evaluate.py "
                "GENERATION_SIZE=32768",
                "max_model_len": f"{CW_README}: max_model_length=32768; an answer gets what the prompt "
                "leaves of 32,768 tokens, as there",
                "grading": "lighteval's extractive match (math-verify): a \\boxed{} first, else the last "
                "expression; lenient is our nearest (the box, else 'the answer is', else the last number)",
                "metric": "the paper's table 2: zero-shot pass@1 per benchmark and their mean",
            },
            gaps=(
                "The 7B evaluation allows 4,096 tokens: protocol cw_grpo_7b.",
                "lighteval tokenizes the chat-templated text with special tokens (a second BOS on "
                "DeepSeek-R1-Distill); ours keeps the chat template's one.",
                "Sampling seeds: lighteval seeds its engine with 1234; ours seeds each request (--seed, "
                "default 0). One sample per question: expect a few points of noise on AIME24 and AMC23.",
            ),
        ),
        Protocol(
            name="prorl",
            paper="ProRL (NVIDIA 2025, arXiv 2507.12507)",
            benchmarks=("aime24", "aime25", "amc", "math500", "minerva", "olympiadbench"),
            template="r1-distill-math",
            decoding="sample",
            runs=16,
            ks=(1,),
            temperature=0.6,
            top_p=0.95,
            max_new_tokens=32768,
            max_model_len=32768,
            grading="boxed",
            metric=Metric(
                "pass@1 (16 samples)",
                k=1,
                groups=(
                    ("math average", ("aime24", "aime25", "amc", "math500", "minerva", "olympiadbench")),
                ),
                reported="figure 2 and section 4.4: on math, 15.7% above DeepSeek-R1-Distill-Qwen-1.5B on "
                "average (the abstract says 14.7%)",
            ),
            sources={
                "benchmarks": "the paper's section 4.3 (math): AIME2024, AIME2025, AMC (AMC 2022 and 2023: "
                "the 83 questions of amc), MATH (MATH-500, following DeepScaleR), Minerva Math, "
                "OlympiadBench",
                "prompt": PROMPTS["r1-distill-math"].source,
                "decoding": "the paper's section 4.4: vLLM 0.7.2, temperature 0.6, top_p 0.95",
                "runs": "the paper's section 4.4: pass@1 estimated from 16 samples per prompt",
                "max_new_tokens": "the paper's section 4.4: a context window of 32k",
                "max_model_len": "the paper's section 4.4: a context window of 32k",
                "grading": "the paper's section 4.4: strictly binary rewards, the extraction not named; "
                "boxed (the last \\boxed{}), which the prompt asks for",
                "metric": "the paper's figure 2: pass@1 per benchmark and their mean",
            },
            gaps=(
                "Only the math benchmarks: the paper's code, logic-puzzle, instruction-following and "
                "GPQA-Diamond (a curated subset, spawn99/GPQA-diamond-ClaudeR1) evaluations are not here.",
                "The prompt is not in the paper (see prompt).",
            ),
        ),
    )
}
# The CW-GRPO authors evaluated their 7B model (Qwen2.5-Math-7B-Instruct, a 4,096-token context) as
# their 1.5B one but within 4,096 tokens: a protocol of its own, which the 7B preset records.
_cw = PROTOCOLS["cw_grpo"]
PROTOCOLS["cw_grpo_7b"] = replace(
    _cw,
    name="cw_grpo_7b",
    paper="CW-GRPO's 7B evaluation (Wang et al. 2026, arXiv 2605.11538)",
    max_new_tokens=4096,
    max_model_len=4096,
    metric=replace(
        _cw.metric,
        reported="table 2, Qwen2.5-Math-7B-Instruct: GRPO 44.1, Clip-Cov 44.7, CW-GRPO 46.7 average",
    ),
    sources={
        **_cw.sources,
        "max_new_tokens": f"{CW_README} '7B evaluation': max_new_tokens 4096; {CW} src/open_r1/evaluate_7b.py "
        "GENERATION_SIZE=4096 (otherwise the same file as evaluate.py)",
        "max_model_len": f"{CW_README} '7B evaluation': max_model_length=4096, the 7B model's own context",
    },
    gaps=tuple(g for g in _cw.gaps if g.startswith("Sampling seeds")),  # Qwen2.5-Math adds no BOS
)
PROTOCOLS = {name: PROTOCOLS[name] for name in ("prompt_aug", "ta_grpo", "cw_grpo", "cw_grpo_7b", "prorl")}


class ProtocolError(ValueError):
    """An unknown protocol name, said in one sentence."""


def names() -> str:
    return ", ".join(PROTOCOLS)


def get(name: str | None) -> Protocol | None:
    """The protocol called `name`; None for None or `none`."""
    if name is None or name == NONE:
        return None
    try:
        return PROTOCOLS[name]
    except KeyError:
        raise ProtocolError(
            f"unknown evaluation protocol {name!r}; choose one of {names()} or none"
        ) from None


def help_text() -> str:
    """--protocol's help: each name with its paper and what it sets."""
    parts = []
    for p in PROTOCOLS.values():
        if p.decoding == "greedy":
            how = f"{p.runs} greedy runs"
        else:
            how = f"{p.runs} sample{'s' if p.runs > 1 else ''} at temperature {p.temperature:g}, top-p {p.top_p:g}"
        parts.append(
            f"{p.name}: {p.paper}, {how}, {p.max_new_tokens:,} new tokens, {p.metric.name} on "
            f"{', '.join(p.benchmarks)}"
        )
    return (
        "the paper's evaluation protocol: its benchmarks, prompt, samples, temperature, top-p, token limits, "
        "grading and metric (docs/eval.md#paper-protocols); options given beside it win, and the results "
        f"say so. {'; '.join(parts)}. none: no protocol (the defaults below, prompt_aug's). Default: none; "
        "eval.iterate: the training run's recipes.eval_protocol (its config.yaml)"
    )


def overrides(
    protocol: Protocol,
    *,
    benchmarks: Sequence[str],
    template: str,
    decoding: Any,
    runs: int,
    ks: Sequence[int],
    grading: str,
    limit: int | None = None,
) -> dict[str, tuple[Any, Any]]:
    """option -> (the value used, the protocol's) for every setting that is not the protocol's;
    `decoding` is an eval.backends.Decoding. --limit counts: a part of a benchmark is not the paper's."""
    p = protocol
    out: dict[str, tuple[Any, Any]] = {}

    def differ(option: str, ours: Any, theirs: Any) -> None:
        if ours != theirs:
            out[option] = (ours, theirs)

    differ("--benchmarks", ",".join(benchmarks), ",".join(p.benchmarks))
    differ("--template", template, p.template)
    differ("--decoding", decoding.mode, p.decoding)
    if decoding.mode == p.decoding:
        differ("--repeats" if p.decoding == "greedy" else "--n", runs, p.runs)
        if p.decoding == "sample":
            differ("--k", ",".join(map(str, sorted(ks))), ",".join(map(str, p.ks)))
            differ("--temperature", decoding.temperature, p.temperature)
            differ("--top-p", decoding.top_p, p.top_p)
    differ("--max-new-tokens", decoding.max_new_tokens, p.max_new_tokens)
    differ("--max-model-len", decoding.max_model_len, p.max_model_len)
    differ("--grading", grading, p.grading)
    if limit is not None:
        out["--limit"] = (limit, None)
    return out


def describe_overrides(name: str, changed: Mapping[str, tuple[Any, Any]]) -> str | None:
    """The one line a command prints when options beside --protocol change it, else None."""
    if not changed:
        return None
    said = ", ".join(
        f"{option} {ours}" + ("" if theirs is None else f" (its {theirs})")
        for option, (ours, theirs) in changed.items()
    )
    return f"note: --protocol {name} with {said}: not the paper's evaluation (summary.json records it)"


def paper_numbers(protocol: Protocol, summary: Mapping[str, Any]) -> dict[str, float | None]:
    """label -> the paper's metric from an eval.run summary (fractions; None where a benchmark of
    the group is missing or incomplete, or the pass@k was not computed)."""
    m = protocol.metric
    benches = summary["benchmarks"]

    def value(block: Mapping[str, Any] | None) -> float | None:
        if not block or "accuracy" not in block:
            return None
        if m.k is None or m.k == 1:  # avg@R, or the mean over samples: the unbiased pass@1
            return block["accuracy"]["mean"]
        return (block.get("pass_at_k") or {}).get(str(m.k))

    out: dict[str, float | None] = {}
    for label, group in m.groups:
        values = [value(benches.get(b)) if (benches.get(b) or {}).get("complete") else None for b in group]
        out[label] = None if any(v is None for v in values) else sum(values) / len(values)
    if m.per_question:
        out["per-question average"] = value(summary.get("per_question_average"))
    return out


def _prompt_cell(template: str) -> str:
    fmt = PROMPTS.get(template)
    if fmt is None:
        return f"`{template}` template, chat template"
    return f"`{template}`, {'chat template' if fmt.chat else 'raw text, no chat template'}"


def _values(p: Protocol) -> dict[str, str]:
    """setting -> the protocol's value as docs/eval.md shows it."""
    sampling = p.decoding == "sample"
    return {
        "benchmarks": ", ".join(f"`{b}`" for b in p.benchmarks),
        "prompt": _prompt_cell(p.template),
        "decoding": f"sample, temperature {p.temperature:g}, top-p {p.top_p:g}" if sampling else "greedy",
        "runs": f"{p.runs} sample{'s' if p.runs > 1 else ''} per question"
        if sampling
        else f"{p.runs} greedy runs",
        **({"ks": ", ".join(map(str, p.ks))} if sampling and p.ks != (1,) else {}),
        "max_new_tokens": f"{p.max_new_tokens:,}",
        "max_model_len": f"{p.max_model_len:,}",
        "grading": f"`{p.grading}`",
        "metric": f"{p.metric.name}: "
        + ", ".join(
            [label for label, _ in p.metric.groups]
            + (["per-question average"] if p.metric.per_question else [])
        ),
    }


def markdown_table() -> str:
    """docs/eval.md#paper-protocols: one table of the protocols, then each protocol's values with
    their sources and its gaps (a test keeps the docs equal to this)."""
    head = (
        "| protocol | paper | benchmarks | prompt | decoding | samples | new tokens / model length | "
        "grading | metric |"
    )
    lines = [head, "|---" * 9 + "|"]
    for p in PROTOCOLS.values():
        v = _values(p)
        lines.append(
            f"| `{p.name}` | {p.paper} | {v['benchmarks']} | {v['prompt']} | {v['decoding']} | {v['runs']} | "
            f"{v['max_new_tokens']} / {v['max_model_len']} | {v['grading']} | {v['metric']} |"
        )
    out = ["\n".join(lines)]
    for p in PROTOCOLS.values():
        rows = [f"`{p.name}` ({p.metric.reported}):", "", "| setting | value | source |", "|---|---|---|"]
        for key, value in _values(p).items():
            rows.append(f"| {key} | {value} | {p.sources.get(key, '')} |")
        if p.gaps:
            rows += ["", *(f"- {gap}" for gap in p.gaps)]
        out.append("\n".join(rows))
    return "\n\n".join(out) + "\n"


def report_line(protocol: Protocol, numbers: Mapping[str, float | None], changed: Sequence[str]) -> str:
    """The line under the results table: the paper's metric as the paper averages it."""
    values = ", ".join(f"{label} {'-' if v is None else f'{100 * v:.1f}'}" for label, v in numbers.items())
    m = protocol.metric
    line = f"protocol {protocol.name}, {protocol.paper}: {m.name}: {values} (the paper: {m.reported})"
    if changed:
        line += f". Not the paper's evaluation: {', '.join(changed)} changed"
    return line + "."
