"""recipes/plan.py: parameter counts against the models' published sizes and a real model's own
count, the memory and disk arithmetic against values worked out by hand, and the command on every
preset (no default preset over an 80 GB GPU or 500 GiB of disk); bad arguments; the padding sdpa
keeps, against verl's own micro-batches."""

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

from recipes import plan as pl
from recipes.tools import models
from recipes.train import compose

REPO = Path(__file__).resolve().parent.parent
EXPERIMENTS = sorted(p.stem for p in (REPO / "configs" / "experiment").glob("*.yaml"))
LAST = re.compile(
    r"^plan: peak_gib_per_gpu=(\d+\.\d) gpu_gib=(\d+\.\d) checkpoint_gib=(\d+\.\d) run_disk_gib=(\d+) "
    r"attention=(\w+) fits=(yes|no)$"
)
GIB = 2**30


@pytest.mark.parametrize(
    ("model", "published"),
    [  # the parameter counts the Hugging Face Hub shows for each model's safetensors
        ("Qwen/Qwen2.5-Math-7B-Instruct", 7_615_616_512),
        ("deepseek-ai/DeepSeek-R1-Distill-Qwen-1.5B", 1_777_088_000),
        ("Qwen/Qwen3-4B", 4_022_468_096),
        ("meta-llama/Llama-3.2-1B-Instruct", 1_235_814_400),
        ("meta-llama/Llama-3.2-3B-Instruct", 3_212_749_824),
        ("smollm2_135m", 134_515_008),
    ],
)
def test_parameter_counts_match_the_published_ones(model, published):
    assert pl.KNOWN[model].params() == published


def test_parameter_count_by_hand_and_against_a_real_model(tmp_path):
    # Qwen2.5-Math-1.5B: embeddings 151,936 x 1,536 (tied); per layer q 1536x1536, k and v 1536x256
    # each, o 1536x1536, q/k/v biases 1,536 + 2 x 256, MLP 3 x 1536 x 8960, two norms; a final norm
    layer = 1536 * 1536 + 2 * 1536 * 256 + 1536 * 1536 + 1536 + 512 + 3 * 1536 * 8960 + 2 * 1536
    assert pl.KNOWN["Qwen/Qwen2.5-Math-1.5B"].params() == 151936 * 1536 + 28 * layer + 1536 == 1_543_714_304
    # the tiny model as recipes.tools.models builds it: its config.json, and torch's own count
    folder = models.build_tiny(tmp_path / "tiny", seed=0, warm_start_steps=0)
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(folder)
    real = sum(p.numel() for p in model.parameters())  # tied weights counted once
    cfg = compose(["experiment=demo_cpu", f"actor_rollout_ref.model.path={folder}"])
    assert pl.arch_of(cfg).params() == real == pl.KNOWN["tiny"].params()


def test_memory_and_disk_of_the_prompt_aug_preset_by_hand():
    p = 1_543_714_304
    # packed micro-batches (FlashAttention 2): the budget's tokens; sdpa's padding is tested below
    e = pl.estimate(compose(["experiment=prompt_aug_qwen2_5_math_1_5b", "recipes.attention=flash"]))
    rows = {what.split(" (")[0]: (roll, train) for what, roll, train in e.rows}
    assert rows["actor parameters"] == pytest.approx((4 * p / 8 / GIB,) * 2)
    assert rows["gradients"] == pytest.approx((0, 4 * p / 8 / GIB))
    assert rows["Adam states"] == pytest.approx((8 * p / 8 / GIB,) * 2)
    # vLLM's 0.6 of 79.6 GiB while generating, asleep during the update
    assert rows["vLLM"] == pytest.approx((0.6 * 79.6, 0))
    # the largest moment is the log-prob pass over 16,384 tokens: bf16 logits, softmax and product,
    # 3 x 2 bytes, above the update's checkpointed layer inputs (28 x 1,536 bf16) + one layer
    # recomputed with its gradients + the bf16 logits and log-softmax (2 x 2 bytes)
    logprob = 16384 * 151936 * 3 * 2
    update = 16384 * (28 * 1536 * 2 + 2 * (4 * 1536 + 4 * 8960) * 2) + 16384 * 151936 * 2 * 2
    assert logprob > update and rows["activations"][1] == 0
    assert rows["logits"][1] == pytest.approx(logprob / GIB)
    assert e.passes_gib["log-prob"] - e.passes_gib["update"] == pytest.approx((logprob - update) / GIB)
    # Adam's step: one fp32 copy of the parameters' shard, less than either pass here
    assert e.passes_gib["optimizer step"] < e.passes_gib["update"]
    assert e.peak_gib == pytest.approx(max(rows["total"]))
    # KV cache: (47.76 - 2.875 bf16 weights - 2) GiB over 2 x 28 layers x 2 KV heads x 128 x 2 bytes
    kv = 0.6 * 79.6 - 2 * p / GIB - 2.0
    assert f"holds {int(kv * GIB // (2 * 28 * 2 * 128 * 2 * 4096)):,} sequences of 4,096 tokens" in " ".join(
        e.notes
    )
    # disk: 60 epochs x (8,523 // 128 = 66) = 3,960 steps, a save every 40: 99; 2 whole (12 bytes a
    # parameter) + 99 HF (2 bytes), in GiB like the GPU's memory
    assert (e.checkpoint_gib, e.hf_gib) == pytest.approx((12 * p / GIB, 2 * p / GIB))
    assert e.run_disk_gib == pytest.approx((2 * 12 * p + 99 * 2 * p) / GIB)
    assert "3,960 steps, 99 saves (every 40)" in " ".join(e.notes)


def test_offloading_and_retention_change_what_they_should():
    base = ["experiment=cw_grpo_open_rs_7b"]
    p = pl.KNOWN["Qwen/Qwen2.5-Math-7B-Instruct"].params()
    e = pl.estimate(compose(base))
    rows = {what.split(" (")[0]: (roll, train) for what, roll, train in e.rows}
    # offloaded while vLLM generates, loaded back for the update
    assert rows["actor parameters"] == pytest.approx((0, 4 * p / 4 / GIB))
    assert rows["Adam states"] == pytest.approx((0, 8 * p / 4 / GIB))
    kept = pl.estimate(compose([*base, "actor_rollout_ref.actor.fsdp_config.optimizer_offload=false"]))
    assert kept.rows[-1][1] == pytest.approx(e.rows[-1][1] + 8 * p / 4 / GIB)
    # every save whole (verl's default) against the GPU platform's 2 whole + HF weights: 4 saves
    whole = pl.estimate(compose([*base, "recipes.checkpoints.keep_full=null"]))
    assert whole.run_disk_gib == pytest.approx(4 * 12 * p / GIB)
    assert e.run_disk_gib == pytest.approx((2 * 12 * p + 4 * 2 * p) / GIB)
    assert pl.saves(100, 25) == 4 and pl.saves(101, 25) == 5 and pl.saves(10, 0) == 0


def _plan(*args):
    return subprocess.run(
        [sys.executable, "-m", "recipes.plan", *args],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=120,
    )


def test_the_command_exits_3_when_it_does_not_fit_and_0_when_it_does(capsys):
    def plan(*args):  # the command's own main, in this process (a fresh one costs ~9 s)
        code = pl.main(list(args))
        return code, capsys.readouterr().out

    # CW-GRPO with 24 responses a forward: 111k tokens of logits, over an 80 GB GPU
    fixed = ["experiment=cw_grpo_open_rs", "actor_rollout_ref.actor.use_dynamic_bsz=false"]
    fixed += ["actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu=24"]
    code, out = plan(*fixed)
    assert code == 3 and "OVER: the peak" in out and LAST.match(out.splitlines()[-1]).group(6) == "no"
    code, out = plan(*fixed, "--gpu-gib", "139.8")  # fits an H200
    assert code == 0 and out.splitlines()[-1].endswith("fits=yes")
    code, out = plan("experiment=prompt_aug_qwen2_5_math_1_5b", "trainer.save_freq=20")  # 198 saves: 604 GiB
    assert code == 3 and "OVER: the run writes 604 GiB, more than 500 GiB (--disk-gib)" in out
    code, out = plan("experiment=prompt_aug_qwen2_5_math_1_5b", "trainer.save_freq=20", "--disk-gib", "610")
    assert code == 0 and out.splitlines()[-1].endswith("run_disk_gib=604 attention=sdpa fits=yes")
    # the command itself, as a user runs it: a config error is one line and exit 2
    bad = _plan("experiment=cw_grpo_open_rs", "trainer.save_freqq=3")
    assert bad.returncode == 2 and bad.stderr.startswith("config error:")


def test_bad_sizes_and_flags_are_one_line_naming_the_argument_and_exit_2(capsys):
    """nan, inf, 0, negative or non-numeric sizes (nan and inf were tracebacks); the old --disk-gb
    (GB, beside --gpu-gib in GiB) and Hydra's own flags, which plan nothing (a Hydra traceback)."""
    bad = [
        ("--gpu-gib", "nan"),
        ("--gpu-gib", "inf"),
        ("--gpu-gib", "0"),
        ("--gpu-gib", "-80"),
        ("--disk-gib", "nan"),
        ("--disk-gib", "-1"),
        ("--disk-gib", "lots"),
        ("--disk-gb", "500"),
        ("--cfg", "job"),
    ]
    said = {}
    for flag, value in bad:
        with pytest.raises(SystemExit) as exit_:
            pl.main([flag, value, "experiment=first_gpu_run"])
        err = capsys.readouterr()
        lines = err.err.strip().splitlines()
        assert exit_.value.code == 2 and err.out == "", (flag, value)
        assert lines[0].startswith("usage: python -m recipes.plan") and len(lines) == 2, lines
        assert lines[1].startswith("python -m recipes.plan: error: ") and flag in lines[1], lines
        said[flag] = lines[1]
    assert said["--disk-gb"].endswith("(the disk is --disk-gib, in GiB like --gpu-gib)")


def test_every_preset_has_a_plan_and_the_defaults_fit():
    for name in EXPERIMENTS:
        e = pl.estimate(compose([f"experiment={name}"]))
        line = pl.report(e).splitlines()[-1]
        assert LAST.match(line), (name, line)
        if "cpu" not in name:  # the GPU presets on 80 GB H100s and 500 GiB of disk
            assert e.fits and e.peak_gib <= 79.6 and e.run_disk_gib <= 500, (name, line)
            # and each says so in its own file, as the plan computes it today
            stated = (
                f"# Plan (python -m recipes.plan): peak {e.peak_gib:.1f} GiB per GPU, "
                f"{e.run_disk_gib:.0f} GiB of disk for the default run.\n"
            )
            assert stated in (REPO / "configs" / "experiment" / f"{name}.yaml").read_text(), name


def test_the_time_model_by_hand():
    """cw_grpo_open_rs at 16 questions x 12 responses on 4 GPUs (4 vLLM replicas), 4,608 tokens,
    packed (FlashAttention 2)."""
    p = pl.KNOWN["deepseek-ai/DeepSeek-R1-Distill-Qwen-1.5B"].params()
    shape = ["data.train_batch_size=16", "actor_rollout_ref.actor.ppo_mini_batch_size=16"]
    e = pl.estimate(compose(["experiment=cw_grpo_open_rs", "recipes.attention=flash", *shape]))
    kv_token = 2 * 28 * 2 * 128 * 2  # K and V, 28 layers, 2 KV heads of 128, bf16
    running = 48  # 192 responses / 4 replicas, all of which fit the KV cache at once
    per_token = (2 * p + running * 2304 * kv_token) / (3.35e12 * 0.5)  # weights + KV read each token
    generation = max(192 * 2048 * per_token / running / 4, 4096 * per_token)
    # the update (8PT) and the reference pass (2PT); one mini-batch a step: no old-log-prob pass
    training = 10 * p * (192 * 2304) / (989e12 * 0.35 * 4)
    assert e.step_s == pytest.approx(generation + training)
    assert e.steps == 100


@pytest.mark.parametrize("card, gpu_gib", [("h200", 139.8), ("h100", pl.H100_GIB)])
def test_each_moment_of_the_training_phase_is_within_a_quarter_of_what_a_gpu_measured(card, gpu_gib):
    """scripts/bench/actor_memory.py on one H200 and one H100 (docs/gpu/): verl's update replayed
    with random weights of each GPU preset's model at its micro-batch sizes; torch's peak at each
    moment (update, optimizer step, log-prob pass) against the plan's training phase on one GPU,
    less the CUDA context (outside torch's allocator). The replay's micro-batches are sequences at
    the limit filling the token budget, no padding: the packed plan (recipes.attention=flash)."""
    shapes = {s["id"]: s for s in json.loads((REPO / "docs/gpu/actor_memory_spec.json").read_text())}
    lines = (REPO / f"docs/gpu/actor_memory_{card}.jsonl").read_text().splitlines()
    measured = [json.loads(line) for line in lines]
    assert {m["id"] for m in measured} == set(shapes)
    for m in measured:
        shape = shapes[m["id"]]
        one_gpu = ["trainer.n_gpus_per_node=1", "trainer.nnodes=1", "recipes.attention=flash"]
        cfg = compose([f"experiment={shape['presets'][0]}", *one_gpu])
        e = pl.estimate(cfg, gpu_gib=gpu_gib)
        assert m["params"] == pl.arch_of(cfg).params(), m["id"]
        planned = {k: v - pl.CUDA_CONTEXT_GIB for k, v in e.passes_gib.items()}
        assert e.rows[-1][2] == pytest.approx(max(e.passes_gib.values()))
        if "error" in m:  # 7B on one GPU: Adam's first step ran out of the card, as planned
            assert "optimizer step" in m["error"] and planned["optimizer step"] > m["allocated_at_error_gib"]
            assert not e.fits
            continue
        assert set(m["peaks_gib"]) == set(planned)
        for moment, peak in m["peaks_gib"].items():
            assert 0.97 * peak <= planned[moment] <= 1.25 * peak, (m["id"], moment, planned[moment], peak)


# One GPU, 1 question x 4 responses, 512 + 4,096 tokens, token budgets of one sequence (4,608)
SMALL = [
    "experiment=cw_grpo_open_rs",
    "trainer.n_gpus_per_node=1",
    "trainer.nnodes=1",
    "data.train_batch_size=1",
    "actor_rollout_ref.rollout.n=4",
    "actor_rollout_ref.actor.ppo_mini_batch_size=1",
    "data.max_prompt_length=512",
    "data.max_response_length=4096",
    "actor_rollout_ref.actor.ppo_max_token_len_per_gpu=4608",
    "actor_rollout_ref.rollout.log_prob_max_token_len_per_gpu=4608",
]


def test_sdpa_exceeds_flash_by_the_factor_padding_predicts_on_a_small_shape():
    """By hand: the 4 sequences are 256 prompt tokens + responses at the middles of four equal
    slices of 4,096 (512, 1,536, 2,560, 3,584): 768, 1,792, 2,816, 3,840, 9,216 in all. A budget of
    4,608 takes 2 micro-batches, balanced: {3,840, 768} and {2,816, 1,792}, 4,608 real tokens each.
    Packed, the largest computes 4,608 tokens; padded to its longest, 2 x 3,840 = 7,680 (5/3 as
    many), and the two 7,680 + 5,632 = 13,312 against 9,216 real: 13/9 of the training time."""
    assert pl.simulated_lengths(4, 512, 4096) == [768, 1792, 2816, 3840]
    flash = pl.estimate(compose([*SMALL, "recipes.attention=flash"]))
    sdpa = pl.estimate(compose([*SMALL, "recipes.attention=sdpa"]))
    a = pl.arch_of(compose(SMALL))
    assert "(log-prob, 7,680 tokens with padding," in " ".join(r[0] for r in sdpa.rows)
    # the log-prob pass: bf16 logits, softmax and their product, 3 x 2 bytes a token and entry
    logprob = (7680 - 4608) * a.vocab * 3 * 2
    assert sdpa.passes_gib["log-prob"] - flash.passes_gib["log-prob"] == pytest.approx(logprob / GIB)
    # the training phase: its largest moment (here the optimizer step's fp32 copy when packed)
    assert sdpa.rows[-1][2] == pytest.approx(max(sdpa.passes_gib.values()))
    assert sdpa.rows[-1][2] > flash.rows[-1][2] == pytest.approx(max(flash.passes_gib.values()))
    # the update: checkpointed layer inputs, a recomputed layer and its gradients, logits and log-softmax
    per_token = a.layers * a.hidden * 2 + 2 * (4 * a.hidden + 4 * a.intermediate) * 2 + a.vocab * 2 * 2
    update = (7680 - 4608) * per_token
    assert sdpa.passes_gib["update"] - flash.passes_gib["update"] == pytest.approx(update / GIB)
    # time: every training pass over 13/9 of its tokens, the generation unchanged
    assert sdpa.train_s == pytest.approx(flash.train_s * 13 / 9)
    assert sdpa.step_s - sdpa.train_s == pytest.approx(flash.step_s - flash.train_s)
    # fixed micro-batches of 2 (no dynamic batching): each at the longer of two responses drawn
    # from the spread, on average 256 + 4,096 x 2/3 against 256 + 2,048; memory counts the limit
    # (2 x 4,608) either way
    fixed = [*SMALL, "actor_rollout_ref.actor.use_dynamic_bsz=false"]
    fixed += ["actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu=2"]
    fixed += ["actor_rollout_ref.rollout.log_prob_micro_batch_size_per_gpu=2"]
    flash = pl.estimate(compose([*fixed, "recipes.attention=flash"]))
    sdpa = pl.estimate(compose([*fixed, "recipes.attention=sdpa"]))
    assert sdpa.rows[-1][2] == pytest.approx(flash.rows[-1][2])
    assert sdpa.train_s == pytest.approx(flash.train_s * (256 + 4096 * 2 / 3) / (256 + 2048))


def test_the_report_names_the_attention_it_assumed(capsys):
    """auto is planned as sdpa (flash-attn on the GPU nodes cannot be seen from where the plan
    runs) with FlashAttention 2's figures beside it; flash and sdpa as asked; a hand-set
    attn_implementation (the CPU platform's sdpa) as set; anything else is one line, exit 2."""
    auto = pl.estimate(compose(["experiment=cw_grpo_open_rs"]))
    out = pl.report(auto).splitlines()
    assert out[1].startswith(
        "attention: PyTorch's sdpa, padding kept: recipes.attention=auto planned at its worse"
    )
    assert LAST.match(out[-1]).group(5) == "sdpa"
    f = auto.flash
    assert f.attention.packed and not auto.attention.packed and f.rows[-1][2] < auto.rows[-1][2]
    assert (
        "with FlashAttention 2 (flash-attn installed on the GPU nodes, recipes.attention=flash): "
        f"training {f.rows[-1][2]:.1f} GiB per GPU, peak {f.peak_gib:.1f}, ~{f.step_s:.0f} s a step"
    ) in out
    assert any(
        line.startswith("padding: each micro-batch is computed at its longest sequence") for line in out
    )
    flash = pl.report(pl.estimate(compose(["experiment=cw_grpo_open_rs", "recipes.attention=flash"])))
    lines = flash.splitlines()
    assert lines[1] == "attention: FlashAttention 2, padding removed (recipes.attention=flash)"
    assert LAST.match(lines[-1]).group(5) == "flash" and "with FlashAttention 2" not in flash
    assert "padding:" not in flash and f"training {f.rows[-1][2]:.1f}" not in flash  # its own table
    sdpa = pl.report(pl.estimate(compose(["experiment=cw_grpo_open_rs", "recipes.attention=sdpa"])))
    assert sdpa.splitlines()[1] == "attention: PyTorch's sdpa, padding kept (recipes.attention=sdpa)"
    assert "with FlashAttention 2" not in sdpa
    cpu = pl.report(pl.estimate(compose(["experiment=demo_cpu"]))).splitlines()
    assert cpu[1] == (
        "attention: sdpa, padding kept: actor_rollout_ref.model.override_config.attn_implementation=sdpa, "
        "actor_rollout_ref.model.use_remove_padding=false"
    )
    assert pl.main(["experiment=cw_grpo_open_rs", "recipes.attention=maybe"]) == 2
    err = capsys.readouterr()
    assert err.out == "" and err.err == "config error: recipes.attention=maybe: one of auto, flash, sdpa.\n"


def test_padded_micro_batches_are_what_verls_engine_computes():
    """The real part: a GPU's 24 simulated sequences given to verl's engine path as verl gives
    them (nested input_ids, no padding; prepare_micro_batches, which calls rearrange_micro_batches
    with the token budget), each micro-batch padded as its FSDP engine pads one without
    remove-padding (to_padded_tensor at the micro-batch's longest); the plan's padded tokens and
    its printed micro-batch are those."""
    import torch
    from verl.utils import tensordict_utils as tu
    from verl.workers.engine.utils import prepare_micro_batches

    lengths = pl.simulated_lengths(24, 512, 4096)
    # 256 + (2i + 1) x 4,096 // 48: 256 + 85 for the shortest, 256 + 4,010 for the longest
    assert (lengths[0], lengths[-1], len(set(lengths))) == (341, 4266, 24)
    ids = torch.nested.as_nested_tensor(
        [torch.ones(n, dtype=torch.long) for n in lengths], layout=torch.jagged
    )
    batch = tu.get_tensordict({"input_ids": ids}, {"use_dynamic_bsz": True, "max_token_len_per_gpu": 16384})
    micro, _ = prepare_micro_batches(batch)
    computed = []
    for mb in micro:
        longest = int(mb["input_ids"].offsets().diff().max())
        real = int(mb["input_ids"].offsets()[-1])
        assert real <= 16384  # the budget counts real tokens only
        shape = (mb.batch_size[0], longest)
        computed.append(torch.nested.to_padded_tensor(mb["input_ids"], 0, output_size=shape).numel())
    assert sorted(pl.padded(pl.micro_batches(tuple(lengths), 16384))) == sorted(computed)
    assert max(computed) > 16384 and sum(computed) > 1.5 * sum(lengths)  # the padding's cost
    # the plan on a config whose GPU holds those 24 sequences (2 questions x 12 responses)
    shape = ["trainer.n_gpus_per_node=1", "trainer.nnodes=1", "data.train_batch_size=2"]
    shape += ["actor_rollout_ref.rollout.n=12", "actor_rollout_ref.actor.ppo_mini_batch_size=2"]
    shape += ["data.max_prompt_length=512", "data.max_response_length=4096"]
    shape += ["actor_rollout_ref.actor.ppo_max_token_len_per_gpu=16384"]
    shape += ["actor_rollout_ref.rollout.log_prob_max_token_len_per_gpu=16384"]
    e = pl.estimate(compose(["experiment=cw_grpo_open_rs", "recipes.attention=sdpa", *shape]))
    assert f"logits ({max(computed):,} tokens with padding x" in " ".join(r[0] for r in e.rows)
    assert f"of up to {max(computed):,} tokens against the 16,384-token budget" in " ".join(e.notes)


def test_the_padding_figures_running_md_quotes_are_the_plans():
    """docs/running.md#memory-and-disk-plan works cw_grpo_open_rs's padding through and quotes
    the plan's FlashAttention 2 line and prompt_aug's last line: as the plan computes them today."""
    e = pl.estimate(compose(["experiment=cw_grpo_open_rs"]))
    cfg = compose(["experiment=cw_grpo_open_rs"])
    world = int(cfg.trainer.n_gpus_per_node) * int(cfg.trainer.nnodes)
    per_gpu = int(cfg.data.train_batch_size) * int(cfg.actor_rollout_ref.rollout.n) // world
    tokens = pl.passes(cfg, world, e.attention)
    text = " ".join((REPO / "docs" / "running.md").read_text().split())
    f = e.flash
    quoted = [
        f"For `cw_grpo_open_rs` ({per_gpu} sequences a GPU, 16,384-token budgets) the largest micro-batch "
        f"is {tokens.infer:,} tokens and the passes do {tokens.infer_work:.2f}x their real tokens: "
        f"{e.rows[-1][2]:.1f} GiB in the training phase instead of {f.rows[-1][2]:.1f}.",
        f"training {f.rows[-1][2]:.1f} GiB per GPU, peak {f.peak_gib:.1f}, ~{f.step_s:.0f} s a step",
        pl.report(pl.estimate(compose(["experiment=prompt_aug_qwen2_5_math_1_5b"]))).splitlines()[-1],
    ]
    assert tokens.update == tokens.infer and tokens.update_work == tokens.infer_work  # one mini-batch
    missing = [q for q in quoted if q not in text]
    assert not missing, missing
    # and the example of a batch of mostly short responses with a few at the limit
    short = pl.padded(pl.micro_batches((800,) * 33 + (4352,) * 3, 16384))
    assert f"give micro-batches of {max(short):,} tokens, {max(short) / 16384:.1f}x the budget" in text
