"""scripts/bench/learning.py end to end on the tiny model (the benchmark itself runs SmolLM2 for
half an hour per method; this checks its plumbing), on the session's learning run
(tests/conftest.py: `learning.py --methods all`, 3 steps, whose launch tests/test_train_e2e.py
checks as the four methods training together): the held-out files, the step-0 evaluation, the
training launch through the benchmark's own command (`python -m recipes.train
experiment=learning_cpu ...`, as for the README's figure), eval.iterate over its checkpoint (verl's
merger, then the transformers backend; tests/test_eval_e2e.py runs it over several), summary.json,
the table and the plots, each number checked against its source (eval.run's samples and
summaries, verl's metrics); a rerun generates nothing again, and what git keeps of the results
folder (step0.json, each run's result.json) gives the same report. The launch learning.py would
make for every method is checked before Ray by recipes.train's own checks, and an override given
on its command line wins over a method's own setting."""

import json
import re
import shutil
import statistics
import subprocess
from pathlib import Path

import pyarrow.parquet as pq
import pytest
import yaml
from script_module import load_script  # tests/script_module.py

from recipes.platforms.cpu import describe_cpu

pytestmark = [pytest.mark.slow, pytest.mark.e2e, pytest.mark.timeout(1200)]

REPO = Path(__file__).resolve().parents[1]
SCRIPT = REPO / "scripts" / "bench" / "learning.py"


# The second grading rule as docs/learning.md states it, written here apart from
# scripts/bench/learning_sets.py: the last number inside the last non-empty \boxed{...} (braces
# balanced), else the response's last number; right when it equals the ground truth as a number.
NUMBER = re.compile(r"-?\d[\d,]*(?:\.\d+)?")


def second_rule_by_hand(response: str, truth: str) -> bool:
    boxes, start = [], 0
    while (i := response.find("\\boxed", start)) >= 0:
        start, j = i + 1, i + len("\\boxed")
        while j < len(response) and response[j].isspace():
            j += 1
        if j < len(response) and response[j] == "{":
            depth = 0
            for k in range(j, len(response)):
                depth += {"{": 1, "}": -1}.get(response[k], 0)
                if depth == 0:
                    boxes.append(response[j + 1 : k].strip())
                    break
    boxes = [b for b in boxes if b]
    numbers = (NUMBER.findall(boxes[-1]) if boxes else []) or NUMBER.findall(response)
    try:
        return bool(numbers) and float(numbers[-1].replace(",", "")) == float(truth.replace(",", ""))
    except ValueError:
        return False


def held_out_samples(folder: Path) -> list[dict]:
    """eval.run's sample lines of toy_heldout in an evaluation folder."""
    lines = (folder / "samples.jsonl").read_text().splitlines()
    return [r for r in map(json.loads, lines) if r["benchmark"] == "toy_heldout"]


def test_learning_bench_on_three_steps_of_the_tiny_model_with_all_four_methods(e2e, tmp_path):
    out, proc = e2e.learning()  # tests/conftest.py: the four methods, 3 steps, 8 held-out questions
    steps, limit = e2e.learning_steps, e2e.learning_held_out
    run, cache = out / "runs" / "all", e2e.cache

    # the held-out questions are the test split's first `limit` (--limit), none of them a training question
    heldout = [json.loads(line) for line in (out / "heldout" / "toy_heldout.jsonl").read_text().splitlines()]
    train = pq.read_table(cache / "data" / "toy_arithmetic" / "train.parquet").to_pylist()
    test = pq.read_table(cache / "data" / "toy_arithmetic" / "test.parquet").to_pylist()
    assert [h["problem"] for h in heldout] == [r["prompt"][-1]["content"] for r in test[:limit]]
    assert not {h["problem"] for h in heldout} & {r["prompt"][-1]["content"] for r in train}
    # three phrasings of each, no training one among them, the answer kept; three-operation questions
    rephrased = [
        json.loads(line) for line in (out / "heldout" / "toy_rephrased.jsonl").read_text().splitlines()
    ]
    assert len(rephrased) == 3 * limit and [r["answer"] for r in rephrased] == [
        h["answer"] for h in heldout for _ in "abc"
    ]
    assert not {r["problem"] for r in rephrased} & {h["problem"] for h in heldout}
    assert rephrased[0]["problem"].endswith(heldout[0]["problem"].split("?", 1)[1])  # the same instruction
    ood = [json.loads(line) for line in (out / "heldout" / "toy_ood.jsonl").read_text().splitlines()]
    assert len(ood) == limit and len({o["problem"] for o in ood}) == limit
    for o in ood:
        expr = o["problem"].removeprefix("What is ").split("?")[0]
        assert expr.count("(") >= 1 and sum(expr.count(op) for op in "+-*") == 3
        assert eval(expr) == int(o["answer"]) >= 0  # noqa: S307 (digits and + - * ( ) only)

    def acc(summary: Path, name: str = "toy_heldout") -> float:
        return json.loads(summary.read_text())["benchmarks"][name]["accuracy"]["mean"]

    # the training launch ran, through the benchmark's own command and settings (the overrides
    # given after them win: ProRL's reset_every): its config, its steps in verl's metrics, one
    # checkpoint, after the last step (--eval-every 3)
    assert f"all: training {steps} steps ..." in proc.stdout
    ran = yaml.safe_load((run / "config.yaml").read_text())
    assert ran["trainer"]["experiment_name"] == "learning_cpu" and ran["data"]["max_response_length"] == 96
    assert (ran["trainer"]["total_training_steps"], ran["trainer"]["save_freq"], ran["data"]["seed"]) == (
        steps,
        steps,
        42,
    )
    assert ran["actor_rollout_ref"]["model"]["path"] == str(cache / "models" / "tiny")
    assert [m for m, on in ran["recipes"]["methods"].items() if on] == [
        "grpo",
        "prompt_aug",
        "ta_grpo",
        "cw_grpo",
        "prorl",
    ]
    assert ran["data"]["max_prompt_length"] == 384 and ran["recipes"]["prorl"]["reset_every"] == 2
    metrics = [
        json.loads(line)
        for f in sorted((run / "metrics").glob("*.jsonl"))
        for line in f.read_text().splitlines()
    ]
    assert [m["step"] for m in metrics] == list(range(1, steps + 1))
    assert sorted(p.name for p in (run / "checkpoints").glob("global_step_*")) == [f"global_step_{steps}"]
    trained = json.loads((run / "train.done").read_text())
    assert trained["cpu"] == describe_cpu() and trained["wall_s"] > sum(
        m["data"]["timing_s/step"] for m in metrics
    )

    # each number from its source, recomputed here: eval.run's own summaries (the training reward's
    # rule), the second rule by hand over eval.run's samples, verl's metrics
    initial = acc(out / "eval_step0" / "summary.json")
    evals = {0: out / "eval_step0", steps: run / "eval" / f"global_step_{steps}"}
    final = acc(evals[steps] / "summary.json")
    samples = {s: held_out_samples(f) for s, f in evals.items()}
    assert all(len(v) == limit for v in samples.values())  # one greedy response per question
    by_hand = {
        s: {str(r["question_id"]): float(second_rule_by_hand(r["response"], r["answer"])) for r in v}
        for s, v in samples.items()
    }
    s = json.loads((out / "summary.json").read_text())
    assert list(s) == ["all"]
    g = s["all"]
    assert g["initial_acc"] == initial and g["final_acc"] == final
    assert g["best_acc"] == max(initial, final)
    second = g["acc_second_rule_by_step"]
    assert {k: v["mean"] for k, v in second.items()} == pytest.approx(
        {str(step): statistics.mean(q.values()) for step, q in by_hand.items()}
    )
    saved = json.loads((run / "result.json").read_text())  # what vs_grpo pairs, question by question
    assert saved["correct_second"] == by_hand[steps]
    assert saved["correct"] == {str(r["question_id"]): float(r["correct"]) for r in samples[steps]}
    assert saved["cpu"] == describe_cpu()  # from train.done: the CPU that trained it
    assert g["n_seeds"] == 1 and g["final_acc_range"] == [final, final]
    last = evals[steps] / "summary.json"
    assert g["acc_ood_by_step"][str(steps)]["mean"] == acc(last, "toy_ood")
    assert g["acc_rephrased_by_step"][str(steps)]["mean"] == acc(last, "toy_rephrased")
    mech = g["mechanism"]  # from the launch's own metrics
    entropy = {m["step"]: m["data"]["actor/entropy"] for m in metrics}
    assert mech["entropy_by_step"] == {str(k): {"mean": v, "min": v, "max": v} for k, v in entropy.items()}
    norms = [m["data"]["actor/grad_norm"] for m in metrics]
    assert mech["grad_norm_std"]["mean"] == pytest.approx(statistics.pstdev(norms))
    # ProRL's reset after step 2, between the evaluations of steps 0 and 3, with the train reward
    # of the steps before it (1, 2) and after it (3)
    reward = [m["data"]["critic/score/mean"] for m in metrics]
    assert [m["data"]["prorl/reset"] for m in metrics] == [0, 1, 0]
    assert mech["prorl_resets"] == [
        [
            {
                "reset_step": 2,
                "before_step": 0,
                "before": initial,
                "after_step": steps,
                "after": final,
                "reward_before": pytest.approx(statistics.mean(reward[:2])),
                "reward_after": pytest.approx(reward[2]),
            }
        ]
    ]
    assert g["steps"] == steps and g["heldout_n"] == limit and g["wall_s"] > trained["wall_s"]
    table = (out / "summary.md").read_text()
    assert f"| all | {100 * initial:.1f}% | {100 * final:.1f}% |" in table
    row = f"| all | 1 | {100 * final:.1f}% | {100 * statistics.mean(by_hand[steps].values()):.1f}% | - | - |"
    assert row in table and row in proc.stdout  # the README's short table
    last_line = table.splitlines()[-1]  # each run's line, last: s/step is the median of steps 2+
    per_step = statistics.median_high(m["data"]["timing_s/step"] for m in metrics[1:])  # (one that ran)
    assert last_line == f"- all: {per_step:.1f} s/step, {g['wall_s'] / 60:.1f} min, {describe_cpu()}"
    for name in ("learning.png", "heldout.png"):
        png = (out / name).read_bytes()
        assert png[:8] == b"\x89PNG\r\n\x1a\n" and len(png) > 10_000
    assert proc.stdout.strip().splitlines()[-1].startswith(f"done: {out}/summary.json")

    # a rerun keeps what is finished: the run's result.json, no training launch, no evaluation
    eval_log = (run / "eval.log").read_text()
    again = e2e.learning_bench(out)
    assert again.returncode == 0, again.stderr[-3000:]
    assert "all: training" not in again.stdout and "evaluating" not in again.stdout
    assert json.loads((out / "summary.json").read_text())["all"] == g
    assert (run / "eval.log").read_text() == eval_log

    # what git keeps of OUT (its .gitignore) is all a fresh clone needs for the same report:
    # step0.json and each run's result.json, not the checkpoints, rollouts, evaluations or held-out files
    subprocess.run(["git", "init", "-q", str(out)], check=True)
    subprocess.run(["git", "-C", str(out), "add", "-A"], check=True)
    kept = subprocess.run(["git", "-C", str(out), "ls-files"], capture_output=True, text=True).stdout.split()
    assert sorted(kept) == [
        ".gitignore",
        "heldout.png",
        "learning.png",
        "runs/all/result.json",
        "step0.json",
        "summary.json",
        "summary.md",
    ]
    clone = tmp_path / "clone"
    for name in kept:
        (clone / name).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy(out / name, clone / name)
    # --report-only: the same numbers, nothing run (no eval.iterate, no training), a method not
    # yet trained left out
    report = e2e.learning_bench(clone, "--report-only", "--methods", "all,prorl")
    assert report.returncode == 0, report.stderr[-3000:]
    assert "prorl: not finished yet; left out" in report.stdout
    assert json.loads((clone / "summary.json").read_text()) == {"all": g}
    assert not (clone / "eval_step0").exists() and not (clone / "runs" / "all" / "eval").exists()


@pytest.mark.parametrize("method", ["grpo", "prompt_aug", "ta_grpo", "cw_grpo", "prorl", "all"])
def test_every_methods_training_launch_passes_the_checks_before_ray(method, tmp_path):
    """The overrides learning.py launches recipes.train with, for the benchmark's own model and
    steps: the config composes and passes ours and verl's checks."""
    from recipes.checks import check_config
    from recipes.train import compose

    learning = load_learning()
    overrides = learning.train_overrides(["experiment=learning_cpu"], method, 30, 10, tmp_path / method)
    cfg = compose(overrides)
    check_config(cfg)
    assert cfg.trainer.total_training_steps == 30 and cfg.trainer.save_freq == 10
    active = [name for name, on in cfg.recipes.methods.items() if on]
    assert active == learning.method_list(method).strip("[]").split(",") and active[0] == "grpo"
    assert len(active) == (5 if method == "all" else 1 if method == "grpo" else 2)


def test_an_override_given_to_the_benchmark_wins_over_a_methods_own_setting(tmp_path):
    """`learning.py ... recipes.prorl.reset_every=2`: the launch resets every 2 steps, not every
    10 (the benchmark's ProRL setting); the run's own steps, folder and seeds win over both."""
    from recipes.train import compose

    learning = load_learning()
    base = ["experiment=learning_cpu", "model=tiny"]
    given = ["recipes.prorl.reset_every=2", "data.max_prompt_length=320", "trainer.total_training_steps=7"]
    for method, ours in (("prorl", 10), ("all", 10)):
        cfg = compose(learning.train_overrides(base, method, 30, 10, tmp_path))
        assert cfg.recipes.prorl.reset_every == ours
        cfg = compose(learning.train_overrides(base + given, method, 30, 10, tmp_path))
        assert (cfg.recipes.prorl.reset_every, cfg.data.max_prompt_length) == (2, 320)
        assert (cfg.trainer.total_training_steps, cfg.recipes.output_dir) == (30, str(tmp_path))


def test_an_override_of_a_setting_some_launch_lacks_is_one_line_before_anything_runs(tmp_path, capsys):
    """`--methods grpo,prorl recipes.prorl.reset_every=2`: GRPO's launch has no ProRL settings, so
    the benchmark stops before it writes or runs anything (exit 2, one line)."""
    learning = load_learning()
    out = tmp_path / "learning"
    with pytest.raises(SystemExit) as stop:
        learning.main(
            ["--methods", "grpo,prorl", "--model", "tiny", "--out", str(out), "recipes.prorl.reset_every=2"]
        )
    assert stop.value.code == 2 and not out.exists()
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("config error: Could not override 'recipes.prorl.reset_every'")


def load_learning(name: str = "learning"):
    """scripts/bench/<name>.py as a module (scripts are run as files, not imported as a package)."""
    return load_script(SCRIPT.with_name(f"{name}.py"))


@pytest.mark.parametrize(
    "text, answer",
    [
        ("11 * 11 = 121. The answer is within \\boxed{}.", "121"),  # SmolLM2's empty box: last number
        ("so \\boxed{42} and then 7 more words 9", "42"),  # a box wins over later numbers
        ("\\boxed{3} first, finally \\boxed{ 1,024 }", "1024"),  # the last non-empty box; commas go
        ("\\boxed{x = 5} then \\boxed{}", "5"),  # the last number inside the box
        ("\\boxed{\\frac{1}{2}}", "2"),  # nested braces balanced; the last number in it
        ("\\boxed{no number} but 17 later", "17"),  # a box without a number: the response's last
        ("difference is -8", "-8"),
        ("no digits at all", None),
        ("\\boxed{12", "12"),  # an unclosed box is not a box: the last number
    ],
)
def test_the_second_grading_rule_reads_these_answers(text, answer):
    assert load_learning("learning_sets").second_rule_answer(text) == answer
    # and the end-to-end test's reference rule grades them alike
    assert second_rule_by_hand(text, answer or "0") == (answer is not None)


def test_second_rule_accuracy_is_a_per_question_mean(tmp_path):
    learning = load_learning("learning_sets")
    samples = tmp_path / "samples.jsonl"
    rows = [("a", 0, "\\boxed{5}"), ("a", 1, "it is 4"), ("b", 0, "The answer is within \\boxed{}. 7")]
    samples.write_text(
        "".join(
            json.dumps({"benchmark": "toy_heldout", "question_id": q, "repeat": r, "response": t}) + "\n"
            for q, r, t in rows
        )
    )
    assert learning.second_rule_accuracy(samples, {"a": "5", "b": "7.0"}) == pytest.approx((0.5 + 1.0) / 2)
    assert not learning.second_rule_correct("\\boxed{5}", "five")


def test_pass_at_k_samples_k_at_the_training_temperature_and_top_p_instead_of_one_greedy_run(tmp_path):
    learning = load_learning()
    greedy = learning.eval_args(tmp_path, 96, "vllm")
    args = learning.sampled(greedy, learning.Sampling(k=8, temperature=0.7, top_p=1.0))
    assert "--repeats" not in args and args[args.index("--decoding") + 1] == "sample"
    assert args[args.index("--n") + 1] == "8" and args[args.index("--k") + 1] == "1,8"
    assert args[args.index("--temperature") + 1] == "0.7" and args[args.index("--top-p") + 1] == "1.0"
    assert greedy[greedy.index("--benchmarks") + 1] == "toy_heldout,toy_rephrased,toy_ood"
    assert args[args.index("--benchmarks") + 1] == "toy_heldout"  # pass@k of the held-out set only
    decoding = ("--decoding", "sample", "--n", "8", "--k", "1,8", "--temperature", "0.7", "--top-p", "1.0")
    rest = [a for a in args if a not in decoding]
    assert rest == [
        "toy_heldout" if a == "toy_heldout,toy_rephrased,toy_ood" else a
        for a in greedy
        if a not in ("--repeats", "1")
    ]


def test_spread_over_seeds_keeps_the_steps_every_seed_reached():
    s = load_learning().spread([{0: 0.1, 10: 0.3}, {0: 0.1, 10: 0.5, 20: 0.9}])
    assert list(s) == ["0", "10"]
    assert s["10"] == {"mean": pytest.approx(0.4), "min": 0.3, "max": 0.5}


def test_paired_difference_to_grpo_by_seed_with_a_bootstrap_interval_under_either_rule():
    learning = load_learning()
    questions = [str(i) for i in range(10)]
    grpo = [
        {"correct": {q: float(int(q) < 5) for q in questions}},
        {"correct": {q: float(int(q) % 2) for q in questions}},
    ]
    better = [{"correct": dict.fromkeys(questions, 1.0)} for _ in grpo]
    d = learning.paired_difference(better, grpo)
    assert d["per_seed"] == [0.5, 0.5] and d["diff"] == 0.5  # each seed: 5 more of 10 right
    low, high = d["ci95"]
    assert 0 < low < 0.5 < high <= 1 and d["beyond_noise"]
    same = learning.paired_difference(grpo, grpo)
    assert same["diff"] == 0 and same["ci95"] == [0.0, 0.0] and not same["beyond_noise"]
    # the same runs under the second rule, where the method is no better: each rule is reported
    for run in (*grpo, *better):
        run["correct_second"] = {q: float(int(q) < 3) for q in questions}
    second = learning.paired_difference(better, grpo, "correct_second")
    assert second["diff"] == 0 and not second["beyond_noise"]
    row = load_learning("learning_report").versus_grpo({"vs_grpo": d, "vs_grpo_second_rule": second})
    assert row == f"+50.0 [{100 * low:+.1f}, {100 * high:+.1f}] / +0.0 [+0.0, +0.0] (noise)"


def test_the_interval_to_grpo_resamples_the_seeds_too_when_there_are_several():
    learning = load_learning()
    questions = [str(i) for i in range(100)]
    grpo = [{"correct": dict.fromkeys(questions, 0.0)} for _ in range(3)]

    def right(n: int) -> dict:  # the first n questions right
        return {"correct": {q: float(int(q) < n) for q in questions}}

    # seeds 0 and 1 gain 40 points over GRPO; on seed 2, GRPO gets 20 questions right that the method misses
    grpo[2] = right(20)
    method = [right(40), right(40), {"correct": dict.fromkeys(questions, 0.0)}]
    d = learning.paired_difference(method, grpo)
    assert d["per_seed"] == [0.4, 0.4, -0.2] and d["diff"] == pytest.approx(0.2)
    # a quarter of the bootstrap draws take seed 2 twice or more (mean 0 or -0.2 plus question noise):
    # the interval reaches below 0, though each seed's question-only interval is far from it
    assert d["ci95"][0] < 0 < d["ci95"][1] and not d["beyond_noise"]
    for m, g in zip(method, grpo, strict=True):
        alone = learning.paired_difference([m], [g])
        assert alone["beyond_noise"] and abs(alone["diff"]) >= 0.2
    # the seeds agree: beyond the noise, the interval inside the range the seeds span
    agree = learning.paired_difference([right(40), right(30), right(35)], [right(0)] * 3)
    assert agree["diff"] == pytest.approx(0.35) and 0.2 < agree["ci95"][0] < 0.35 < agree["ci95"][1] < 0.5


def test_verdicts_say_under_which_rules_a_difference_is_beyond_the_noise():
    report = load_learning("learning_report")

    def vs(diff: float, beyond: bool, per_seed=(0.06, 0.08, 0.04)) -> dict:
        return {"diff": diff, "beyond_noise": beyond, "per_seed": list(per_seed)}

    summary = {
        "grpo": {"n_seeds": 3},
        "both": {"n_seeds": 3, "vs_grpo": vs(0.06, True), "vs_grpo_second_rule": vs(0.05, True)},
        "worse": {
            "n_seeds": 3,
            "vs_grpo": vs(-0.06, True, (-0.1, -0.1, 0.02)),
            "vs_grpo_second_rule": vs(-0.05, True),
        },
        "opposite": {
            "n_seeds": 2,
            "vs_grpo": vs(0.06, True, (0.06, 0.06)),
            "vs_grpo_second_rule": vs(-0.05, True),
        },
        "rule_only": {"n_seeds": 3, "vs_grpo": vs(0.05, True), "vs_grpo_second_rule": vs(0.01, False)},
        "second_only": {
            "n_seeds": 3,
            "vs_grpo": vs(0.01, False, (0.03, 0.0, 0.0)),
            "vs_grpo_second_rule": vs(0.05, True),
        },
        "noise": {
            "n_seeds": 1,
            "vs_grpo": vs(0.02, False, (0.02,)),
            "vs_grpo_second_rule": vs(-0.01, False, (-0.01,)),
        },
    }
    three = "3 of 3 seeds on that side under the training reward's rule"
    assert report.verdicts(summary).splitlines() == [
        f"- both (3 seed(s)): +6.0 / +5.0 points, better than GRPO beyond the noise under both rules; {three}",
        "- worse (3 seed(s)): -6.0 / -5.0 points, worse than GRPO beyond the noise under both rules; "
        "2 of 3 seeds on that side under the training reward's rule",
        "- opposite (2 seed(s)): +6.0 / -5.0 points, beyond the noise under both rules, in opposite directions; "
        "2 of 2 seeds on that side under the training reward's rule",
        f"- rule_only (3 seed(s)): +5.0 / +1.0 points, beyond the noise under the training reward's rule only; {three}",
        "- second_only (3 seed(s)): +1.0 / +5.0 points, beyond the noise under the second rule only; "
        "1 of 3 seeds on that side under the training reward's rule",
        "- noise (1 seed(s)): +2.0 / -1.0 points, within the noise under both rules; "
        "one seed: the interval covers the choice of questions, not of seeds",
    ]
    assert report.verdicts({"grpo": {"n_seeds": 1}}) == ""


def test_each_runs_line_gives_its_median_step_seconds_and_the_cpu_that_trained_it():
    def run(name, seconds, cpu=None):
        train = [{"step": i + 1, "timing_s/step": s} for i, s in enumerate(seconds)]
        return {"run": name, "train": train, "wall_s": 600.0} | ({"cpu": cpu} if cpu else {})

    results = {  # step 1 (start-up) is left out of the median: 10, 20, 30 -> 20; 90, 100 -> 100
        "grpo": [run("grpo", [50.0, 30.0, 10.0, 20.0]), run("grpo_seed1", [500.0, 100.0, 90.0], "EPYC, AVX2")]
    }
    assert load_learning("learning_report").machines(results) == (
        "- grpo: 20.0 s/step, 10.0 min, CPU not recorded\n- grpo_seed1: 100.0 s/step, 10.0 min, EPYC, AVX2\n"
    )


def test_mechanism_metrics_of_one_seed_by_hand():
    steps = [
        (1, 1.0, 0.0, 0.0, 0.1),
        (2, 3.0, 0.2, 1.0, 0.2),
        (3, 2.0, 0.1, 0.0, 0.6),
        (4, 2.0, 0.1, 0.0, 0.4),
        (5, 2.0, 0.1, 0.0, 0.9),
        (6, 2.0, 0.1, 0.0, 0.9),
    ]  # step, grad norm, clip fraction, reset, train reward
    train = [
        {"step": s, "actor/entropy": 0.5 * s, "response_length/mean": 10 * s, "actor/grad_norm": g}
        | {"actor/pg_clipfrac": c, "prorl/reset": r, "critic/score/mean": w}
        for s, g, c, r, w in steps
    ]
    m = load_learning("learning_report").mechanism({"train": train, "acc": {0: 0.1, 2: 0.3, 4: 0.5}})
    assert m["entropy"][3] == 1.5 and m["response_length"] == {s: 10 * s for s in range(1, 7)}
    assert m["grad_norm_std"] == pytest.approx((2 / 6) ** 0.5)  # 1, 3 and four 2s around 2
    assert m["clipfrac_mean"] == pytest.approx(0.6 / 6)
    assert m["clipfrac"] == {1: 0.0, 2: 0.2, 3: 0.1, 4: 0.1, 5: 0.1, 6: 0.1}  # its own panel, by step
    # the reset at step 2 acts after step 2's update: the checkpoint at step 2 against the next
    # one, and the train reward of steps 1-2 (all there is before it) against steps 3-5
    assert m["prorl_resets"] == [
        {"reset_step": 2, "before_step": 2, "before": 0.3, "after_step": 4, "after": 0.5}
        | {"reward_before": pytest.approx(0.15), "reward_after": pytest.approx(1.9 / 3)}
    ]


def test_the_plot_has_a_panel_for_pass_at_k_and_for_prorls_resets(tmp_path):
    report = load_learning("learning_report")
    band = {str(k): {"mean": 0.1 * k, "min": 0.05 * k, "max": 0.15 * k} for k in (0, 1, 2)}
    mechanism = {f"{name}_by_step": band for name in report.MECHANISM}
    reset = {"reset_step": 4, "before_step": 4, "before": 0.2, "after_step": 8, "after": 0.3}
    reset |= {"reward_before": 0.25, "reward_after": 0.125}
    summary = {
        m: {
            **{
                k: band
                for k in (
                    "acc_by_step",
                    "acc_second_rule_by_step",
                    "acc_rephrased_by_step",
                    "acc_ood_by_step",
                )
            },
            "pass@k_by_step": {"0": band["0"], "2": band["2"]},
            "n_seeds": 2,
            "mechanism": mechanism | ({"prorl_resets": [[reset], []]} if m == "prorl" else {}),
        }
        for m in ("grpo", "prorl")
    }
    results = {m: [{"train": [{"step": 1, "critic/score/mean": 0.5}]}] for m in summary}
    report.plot(summary, results, tmp_path / "p.png", 20)
    import matplotlib.pyplot as plt

    image = plt.imread(tmp_path / "p.png")
    assert image.shape[0] > 1.3 * 1000 and image.shape[1] > 1700  # three rows of panels at 110 dpi
    # and summary.md's lines: seed 0's reset, with GRPO's train reward over the same steps (seed 1
    # did not reset)
    results["grpo"] = [{"train": [{"step": s, "critic/score/mean": 0.1 * s} for s in range(1, 9)]}]
    assert report.reset_lines(summary, results) == (
        "- prorl, seed 0, reset after step 4: held-out 20.0% (step 4) -> 30.0% (step 8); "
        "train reward 0.250 (steps 2-4) -> 0.125 (steps 5-7), GRPO's 0.300 -> 0.600\n"
    )
    # the four methods together: their reward has prompt augmentation's format term, so prompt
    # augmentation's run is the control, not GRPO's
    summary["all"] = summary["prorl"]
    results["prompt_aug"] = [{"train": [{"step": s, "critic/score/mean": 0.2 * s} for s in range(1, 9)]}]
    assert report.reset_lines(summary, results).splitlines()[1] == (
        "- all, seed 0, reset after step 4: held-out 20.0% (step 4) -> 30.0% (step 8); "
        "train reward 0.250 (steps 2-4) -> 0.125 (steps 5-7), prompt_aug's 0.600 -> 1.200"
    )


def test_the_readme_table_and_figure_show_each_methods_mean_and_spread_over_seeds(tmp_path):
    report = load_learning("learning_report")

    def curve(final: tuple[float, float, float]) -> dict:  # step 0, then (mean, min, max) at step 10
        return {
            "0": {"mean": 0.2, "min": 0.2, "max": 0.2},
            "10": dict(zip(("mean", "min", "max"), final, strict=True)),
        }

    def vs(diff: float, low: float, high: float, per_seed: list[float]) -> dict:
        return {"diff": diff, "ci95": [low, high], "beyond_noise": low > 0 or high < 0, "per_seed": per_seed}

    summary = {
        "grpo": {"n_seeds": 3, "steps": 10, "acc_by_step": curve((0.44, 0.41, 0.47))},
        "better": {
            "n_seeds": 3,
            "steps": 10,
            "acc_by_step": curve((0.5, 0.48, 0.53)),
            "vs_grpo": vs(0.06, 0.02, 0.1, [0.07, 0.06, 0.05]),
            "vs_grpo_second_rule": vs(0.01, -0.03, 0.05, [0.02, 0.0, 0.01]),
        },
        "one": {
            "n_seeds": 1,
            "steps": 10,
            "acc_by_step": curve((0.3, 0.3, 0.3)),
            "vs_grpo": vs(-0.17, -0.235, -0.105, [-0.17]),
            "vs_grpo_second_rule": vs(-0.125, -0.185, -0.065, [-0.125]),
        },
    }
    for s in summary.values():
        s["acc_second_rule_by_step"] = curve((0.4, 0.35, 0.45))
    rows = report.headline(summary).splitlines()
    assert rows[2:] == [
        "| grpo | 3 | 44.0% (41.0-47.0) | 40.0% (35.0-45.0) | - | - |",
        "| better | 3 | 50.0% (48.0-53.0) | 40.0% (35.0-45.0) | +6.0 [+2.0, +10.0] / +1.0 [-3.0, +5.0] "
        "| beyond the noise under the training reward's rule only |",
        "| one | 1 | 30.0% | 40.0% | -17.0 [-23.5, -10.5] / -12.5 [-18.5, -6.5] "
        "| worse than GRPO beyond the noise under both rules (one seed: the seeds' spread not covered) |",
    ]
    report.plot_heldout(summary, tmp_path / "heldout.png", 200)
    import matplotlib.pyplot as plt

    image = plt.imread(tmp_path / "heldout.png")
    assert image.shape[0] > 450 and image.shape[1] > 1250  # two panels side by side at 110 dpi


def test_the_readme_shows_the_committed_summarys_table():
    """The README's table and docs/results/learning/summary.md are drawn from the committed
    summary.json: a run added without regenerating them fails here."""
    results = REPO / "docs" / "results" / "learning"
    table = load_learning("learning_report").headline(json.loads((results / "summary.json").read_text()))
    assert table in (REPO / "README.md").read_text()
    assert (results / "summary.md").read_text().startswith(table)


def test_step0_evaluates_pass_at_k_again_only_when_its_sampling_changed(tiny_model, tmp_path):
    """step0.json names pass@k's k, temperature and top-p: a rerun with the same settings runs
    nothing; other settings (here a top-p) re-sample pass@k, and the greedy evaluation is kept."""
    learning = load_learning()
    out = tmp_path / "learning"
    heldout = out / "heldout"
    base = ["experiment=learning_cpu", "model=tiny"]
    n = learning.write_heldout(base, heldout, limit=4)
    greedy = learning.eval_args(heldout, 16, "hf")

    def step0(top_p: float) -> dict:
        sampling = learning.Sampling(k=2, temperature=0.7, top_p=top_p)
        task = learning.Task(out, base, n, greedy, False, sampling)
        return learning.step0(task, str(tiny_model), learning.heldout_answers(heldout))

    def top_p_sampled() -> float:
        return json.loads((out / "eval_step0_pass" / "config.json").read_text())["top_p"]

    first = step0(0.95)
    assert first["sampling"] == {"k": 2, "temperature": 0.7, "top_p": 0.95} and top_p_sampled() == 0.95
    greedy_summary = (out / "eval_step0" / "summary.json").stat().st_mtime_ns
    log = (out / "eval_step0.log").read_text()
    assert step0(0.95) == first and (out / "eval_step0.log").read_text() == log  # nothing run
    second = step0(1.0)
    assert second["sampling"]["top_p"] == 1.0 and top_p_sampled() == 1.0
    assert json.loads((out / "step0.json").read_text())["sampling"]["top_p"] == 1.0
    assert (out / "eval_step0" / "summary.json").stat().st_mtime_ns == greedy_summary
    assert {k: v for k, v in second.items() if k not in ("sampling", "pass_k")} == {
        k: v for k, v in first.items() if k not in ("sampling", "pass_k")
    }
