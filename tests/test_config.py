"""recipes.train's configs: every preset composes into a config verl accepts, and each kind of bad
config fails before Ray starts with one sentence that names the key."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from hydra.errors import ConfigCompositionException, MissingConfigException
from omegaconf import OmegaConf

from recipes.checks import check_config, check_data
from recipes.console import eta, format_duration, format_row, header
from recipes.settings import ConfigError
from recipes.train import compose, planned_steps, translate_overrides

REPO = Path(__file__).resolve().parent.parent
EXPERIMENTS = sorted(p.stem for p in (REPO / "configs" / "experiment").glob("*.yaml"))


@pytest.mark.parametrize("experiment", EXPERIMENTS)
def test_every_experiment_preset_passes_ours_and_verls_checks(experiment):
    cfg = compose([f"experiment={experiment}"])
    check_config(cfg)  # ours, then verl's validate_config and dataclass conversions
    assert cfg.recipes.platform in ("cpu", "gpu")
    assert cfg.recipes.methods


@pytest.mark.parametrize("method", ["grpo", "dapo", "dr_grpo"])
@pytest.mark.parametrize(
    "model", ["qwen2_5_math_1_5b", "deepseek_r1_distill_qwen_1_5b", "qwen3_4b", "llama3_2_1b"]
)
def test_gpu_configs_are_valid_verl_configs_without_a_gpu(method, model):
    cfg = compose([f"model={model}", "data=math_l3to5", f"method=[{method}]", "platform=gpu"])
    check_config(cfg)
    assert cfg.actor_rollout_ref.rollout.name == "vllm"
    assert cfg.actor_rollout_ref.model.path.count("/") == 1  # a hub id


def test_baselines_set_what_their_papers_say():
    grpo = compose(["experiment=demo_cpu", "method=[grpo]"])
    dapo = compose(["experiment=demo_cpu", "method=[dapo]"])
    dr = compose(["experiment=demo_cpu", "method=[dr_grpo]"])
    a = lambda c: c.actor_rollout_ref.actor  # noqa: E731
    assert (a(grpo).clip_ratio_low, a(grpo).clip_ratio_high, a(grpo).use_kl_loss) == (0.2, 0.2, True)
    assert a(grpo).kl_loss_type == "low_var_kl" and grpo.algorithm.norm_adv_by_std_in_grpo
    assert (a(dapo).clip_ratio_low, a(dapo).clip_ratio_high) == (0.2, 0.28)
    assert a(dapo).loss_agg_mode == "token-mean" and not a(dapo).use_kl_loss
    assert dapo.algorithm.filter_groups.enable and dapo.algorithm.filter_groups.metric == "acc"
    assert not dr.algorithm.norm_adv_by_std_in_grpo and not a(dr).use_kl_loss
    assert a(dr).loss_agg_mode == "seq-mean-token-sum-norm"


def test_model_and_data_choices_reach_the_config(tmp_path, monkeypatch):
    monkeypatch.setenv("RECIPES_CACHE", str(tmp_path))
    cfg = compose(["experiment=demo_cpu", "model=smollm2_135m"])
    assert cfg.recipes.model == "smollm2_135m" and cfg.recipes.data == "toy_arithmetic"
    assert cfg.actor_rollout_ref.model.path == f"{tmp_path}/models/smollm2_135m"
    assert cfg.data.train_files == f"{tmp_path}/data/toy_arithmetic/train.parquet"
    assert cfg.actor_rollout_ref.rollout.name == "vllm"
    assert cfg.actor_rollout_ref.rollout.enable_sleep_mode is False


def test_model_shorthand_is_translated_for_verls_packaged_group():
    assert translate_overrides(["model=tiny", "+model=x", "~model", "model_engine=dp", "data=math"]) == [
        "model@actor_rollout_ref.model=tiny",
        "+model@actor_rollout_ref.model=x",
        "~model@actor_rollout_ref.model",
        "model_engine=dp",
        "data=math",
    ]


BAD = [
    (["method=[grpo,dapo]"], "method: choose exactly one baseline"),
    (
        ["data.train_batch_size=6"],
        "data.train_batch_size=6 must be a multiple of actor_rollout_ref.actor.ppo_mini_batch_size=4",
    ),
    (
        ["actor_rollout_ref.rollout.n=3", "data.train_batch_size=4", "trainer.n_gpus_per_node=8"],
        "divisible by the 8 workers",
    ),
    (
        ["actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu=5"],
        "ppo_micro_batch_size_per_gpu=5 must divide",
    ),
    (["actor_rollout_ref.rollout.n=1"], "actor_rollout_ref.rollout.n=1"),
    (
        ["actor_rollout_ref.rollout.name=sglang"],
        "actor_rollout_ref.rollout.name=sglang: the recipes roll out through verl's vLLM server",
    ),
    (
        ["actor_rollout_ref.rollout.name=hf"],  # the demo is deterministic; the hf rollout is not seeded
        "actor_rollout_ref.rollout.name=hf takes no per-request seed: set recipes.deterministic=false.",
    ),
    (
        ["actor_rollout_ref.rollout.enable_sleep_mode=true"],
        "vLLM's CPU platform has no sleep mode",
    ),
    (["+actor_rollout_ref.actor.clip_ratio_hihg=0.3"], "actor_rollout_ref.actor: "),
    # settings verl checks too late (in a Ray worker) or never
    (["trainer.total_training_steps=-1"], "trainer.total_training_steps=-1 must be an integer >= 1"),
    (["actor_rollout_ref.rollout.temperature=-1"], "rollout.temperature=-1 must be a number >= 0"),
    (["data.max_response_length=0"], "data.max_response_length=0 must be an integer >= 1"),
    (["actor_rollout_ref.actor.optim.lr=abc"], "actor_rollout_ref.actor.optim.lr='abc' must be a number > 0"),
    (["actor_rollout_ref.rollout.n=two"], "actor_rollout_ref.rollout.n='two' must be an integer >= 1"),
    (["actor_rollout_ref.rollout.top_p=1.5"], "top_p=1.5 must be a number in (0, 1]"),
    (["data.train_batch_size=2.5"], "data.train_batch_size=2.5 must be an integer"),
    (["recipes.rollout_poll_s=0"], "recipes.rollout_poll_s=0 must be a number > 0"),
    (
        ["+reward.custom_reward_function.reward_kwargs.timeout_s=0"],
        "reward_kwargs.timeout_s=0 must be in (0, 300]",
    ),
    # misspelled keys added with `+`, as Hydra suggests for a key it does not know
    (["+trainer.total_trainig_steps=3"], "did you mean trainer.total_training_steps?"),
    (["+data.train_batch_sise=8"], "+data.train_batch_sise: data has no setting 'train_batch_sise'"),
    (
        ["algorithm.adv_estimator=no_such_estimator"],
        "algorithm.adv_estimator=no_such_estimator is not registered",
    ),
    (["actor_rollout_ref.actor.policy_loss.loss_mode=nope"], "policy_loss.loss_mode=nope is not registered"),
    (["method=[prompt_aug]"], "method=[dapo,prompt_aug]"),
    (["method=[grpo,prompt_aug]", "recipes.prompt_aug.templates=[abel,qwen_math]"], "'qwen_math' is neither"),
    (["method=[grpo,prompt_aug]", "recipes.prompt_aug.sampling=per_group"], "recipes.prompt_aug.sampling="),
    (
        ["method=[grpo,prompt_aug]", "recipes.prompt_aug.weights={formal:-1}"],
        "recipes.prompt_aug.weights.formal=-1",
    ),
    (
        ["method=[grpo,prompt_aug]", "actor_rollout_ref.rollout.agent.default_agent_loop=single_turn_agent"],
        "default_agent_loop=single_turn_agent",
    ),
    (["method=[grpo,prompt_aug]", "trainer.v1.trainer_mode=sync"], "trainer.v1.trainer_mode=sync"),
    (["method=[grpo,ta_grpo]", "actor_rollout_ref.rollout.n=6"], "rollout.n=6 must be (N+1) x G"),
    (["method=[grpo,ta_grpo]", "recipes.ta_grpo.anchor=q0"], "recipes.ta_grpo.anchor='q0'"),
    (
        ["method=[grpo,ta_grpo]", "actor_rollout_ref.rollout.calculate_log_probs=true"],
        "calculate_log_probs must be false: with recipes.ta_grpo.anchor=original",
    ),
    (
        ["method=[grpo,ta_grpo]", "algorithm.rollout_correction.rollout_is=token"],
        "algorithm.rollout_correction.rollout_is must be null",
    ),
    (
        ["method=[grpo,ta_grpo]", "recipes.ta_grpo.groups=per_variant", "actor_rollout_ref.rollout.n=4"],
        "G >= 2",
    ),
    (
        ["method=[grpo,ta_grpo]", "actor_rollout_ref.rollout.agent.default_agent_loop=single_turn_agent"],
        "method(s) ta_grpo build each rollout's prompt in the agent loop",
    ),
    (
        ["method=[grpo,cw_grpo]", "actor_rollout_ref.actor.policy_loss.loss_mode=vanilla"],
        "loss_mode=vanilla (the command line): method cw_grpo needs its own loss, which it sets from "
        "recipes.cw_grpo.{logp_per_sequence,all_positions,grad_through_weights}",
    ),
    (
        ["method=[grpo,cw_grpo]", "actor_rollout_ref.actor.policy_loss.loss_mode=cw_grpo-grad-allpos"],
        "loss_mode=cw_grpo-grad-allpos (the command line): method cw_grpo needs its own loss",
    ),
    (
        [
            "method=[grpo,cw_grpo]",
            "recipes.cw_grpo.all_positions=true",
            "actor_rollout_ref.actor.policy_loss.loss_mode=cw_grpo-grad",
        ],
        "contradicts the recipes.cw_grpo settings, which name the loss cw_grpo-allpos",
    ),
    (
        ["method=[grpo,ta_grpo]", "recipes.ta_grpo.group_size=4", "actor_rollout_ref.rollout.n=8"],
        "rollout.n=8 (the command line) is (N+1) x G = 4 x 2, not recipes.ta_grpo.group_size=4",
    ),
    (
        ["method=[grpo,prorl]", "recipes.prorl.kl_coef=0.01", "actor_rollout_ref.actor.kl_loss_coef=0.02"],
        "kl_loss_coef=0.02 (the command line) contradicts recipes.prorl.kl_coef=0.01",
    ),
    (
        ["recipes.deterministic=true", "actor_rollout_ref.rollout.enable_chunked_prefill=true"],
        "recipes.deterministic=true with actor_rollout_ref.rollout.enable_chunked_prefill=true",
    ),
    # ProRL resets the reference of the KL loss
    (
        ["method=[prorl,dapo]", "actor_rollout_ref.actor.use_kl_loss=false"],
        "actor_rollout_ref.actor.use_kl_loss must be true",
    ),
    (["method=[dapo,prorl]", "+recipes.prorl.every=3"], "recipes.prorl: unknown settings ['every']"),
    (["method=[dapo,prorl]", "recipes.prorl.kl_patience=0"], "recipes.prorl.kl_patience=0 must be >= 1"),
    (["method=[dapo,prorl]", "recipes.prorl.val_plateau=2"], "set recipes.prorl.val_metric"),
    (
        [
            "method=[dapo,prorl]",
            "recipes.prorl.val_plateau=2",
            "recipes.prorl.val_metric=val-core/x/acc/mean@1",
        ],
        "trainer.test_freq=-1: recipes.prorl.val_decline / val_plateau need validations",
    ),
    (["method=[dapo,prorl]", "actor_rollout_ref.model.lora_rank=8"], "actor_rollout_ref.model.lora"),
    (["method=[dapo,prorl]", "actor_rollout_ref.hybrid_engine=false"], "hybrid_engine must be true"),
    (
        ["method=[dapo,prorl]", "trainer.v1.trainer_mode=sync"],
        "method(s) prorl run in our trainer, recipes_sync",
    ),
]


@pytest.mark.parametrize(("overrides", "message"), BAD, ids=[m.split()[0] for _, m in BAD])
def test_bad_config_fails_with_a_sentence_naming_the_key(overrides, message):
    with pytest.raises(ConfigError) as err:
        check_config(compose(["experiment=demo_cpu", *overrides]))
    assert message in str(err.value)
    assert "\n" not in str(err.value)


def test_a_head_size_vllms_cpu_attention_cannot_run_is_refused_before_ray(tmp_path):
    model = tmp_path / "model"
    model.mkdir()
    (model / "config.json").write_text(json.dumps({"hidden_size": 64, "num_attention_heads": 4}))
    with pytest.raises(ConfigError, match="head size 16; vLLM's CPU attention takes 32 to 512"):
        check_config(compose(["experiment=demo_cpu", f"actor_rollout_ref.model.path={model}"]))
    (model / "config.json").write_text(
        json.dumps({"hidden_size": 64, "num_attention_heads": 4, "head_dim": 32})
    )
    check_config(compose(["experiment=demo_cpu", f"actor_rollout_ref.model.path={model}"]))


@pytest.mark.parametrize("baseline", ["grpo", "dapo", "dr_grpo"])
def test_prompt_aug_composes_with_every_baseline(baseline):
    alone = compose(["experiment=demo_cpu", f"method=[{baseline}]"])
    both = compose(["experiment=demo_cpu", f"method=[{baseline},prompt_aug]", "data.max_prompt_length=320"])
    check_config(both)
    assert dict(both.recipes.methods) == {baseline: True, "prompt_aug": True}
    assert both.actor_rollout_ref.rollout.agent.default_agent_loop == "recipes_prompt_variants"
    assert both.recipes.prompt_aug.seed == both.data.seed
    assert both.actor_rollout_ref.actor == alone.actor_rollout_ref.actor  # the baseline's loss is untouched
    assert both.algorithm == alone.algorithm


def test_prompt_aug_paper_presets():
    main = compose(["experiment=prompt_aug_qwen2_5_math_1_5b"])
    actor = main.actor_rollout_ref.actor
    assert (main.data.train_batch_size, main.actor_rollout_ref.rollout.n, actor.ppo_mini_batch_size) == (
        128,
        8,
        32,
    )
    assert (actor.optim.lr, actor.clip_ratio_low, actor.clip_ratio_high, actor.clip_ratio_c) == (
        1e-6,
        0.2,
        0.28,
        3.0,
    )
    assert (
        actor.loss_agg_mode == "token-mean" and not actor.use_kl_loss and not main.algorithm.use_kl_in_reward
    )
    assert not main.algorithm.filter_groups.enable
    assert (main.data.max_prompt_length, main.data.max_response_length) == (1024, 3072)
    # validation every 20 steps as the paper; a save every 40 keeps the run under 500 GiB (recipes.plan)
    assert (main.trainer.total_epochs, main.trainer.save_freq, main.trainer.test_freq) == (60, 40, 20)
    assert main.recipes.prompt_aug.templates == "all" and main.recipes.prompt_aug.val_template == "qwen-math"
    dapo = compose(["experiment=prompt_aug_baseline_dapo_qwen2_5_math_1_5b"])
    grpo = compose(["experiment=prompt_aug_baseline_grpo_qwen2_5_math_1_5b"])
    for base in (dapo, grpo):
        assert list(base.recipes.prompt_aug.templates) == ["qwen-math"]
        assert base.reward.custom_reward_function.reward_kwargs.format_weight == 0.0
        assert base.data == main.data
    assert dapo.actor_rollout_ref.actor == actor
    # the authors' public GRPO script: clip 0.2, k3 KL 0.001, token-mean, 20 epochs
    g = grpo.actor_rollout_ref.actor
    assert (g.clip_ratio_low, g.clip_ratio_high, g.loss_agg_mode) == (0.2, 0.2, "token-mean")
    assert (g.use_kl_loss, g.kl_loss_type, g.kl_loss_coef, grpo.trainer.total_epochs) == (
        True,
        "low_var_kl",
        0.001,
        20,
    )
    check_config(grpo)


def test_ta_grpo_composes_with_baselines_and_prompt_aug():
    cfg = compose(["experiment=demo_cpu", "method=[dapo,prompt_aug,ta_grpo]", "data.max_prompt_length=320"])
    check_config(cfg)
    assert set(cfg.recipes.methods) == {"dapo", "prompt_aug", "ta_grpo"}
    own = compose(
        ["experiment=demo_cpu", "method=[grpo,ta_grpo]", "recipes.ta_grpo.anchor=own"]
        + ["actor_rollout_ref.rollout.calculate_log_probs=true"]
    )
    check_config(own)  # unanchored: the rollout's log-probs are comparable again


def test_ta_grpo_rows_without_enough_rephrasings_fail_before_ray(tmp_path, monkeypatch):
    from recipes.tools.data import write_toy_arithmetic

    monkeypatch.setenv("RECIPES_CACHE", str(tmp_path))
    overrides = ["experiment=demo_cpu", "method=[grpo,ta_grpo]", "actor_rollout_ref.rollout.n=10"]
    overrides += ["actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu=8", "recipes.ta_grpo.n_rephrasings=4"]
    cfg = compose(overrides)
    check_config(cfg)
    write_toy_arithmetic(Path(cfg.data.train_files).parent, n_train=20, n_test=5)  # 3 rephrasings each
    with pytest.raises(
        ConfigError, match="row 0 .and 19 more. has fewer than recipes.ta_grpo.n_rephrasings=4"
    ):
        check_data(cfg)
    check_data(compose(overrides[:-1] + ["recipes.ta_grpo.n_rephrasings=3", "actor_rollout_ref.rollout.n=8"]))


def test_unknown_key_fails_at_composition():
    with pytest.raises(ConfigCompositionException, match="trainer.totl_training_steps"):
        compose(["experiment=demo_cpu", "trainer.totl_training_steps=3"])
    with pytest.raises(MissingConfigException, match="method/ppo_but_better"):
        compose(["experiment=demo_cpu", "method=[ppo_but_better]"])


def test_no_model_or_data_chosen_is_a_clear_error():
    with pytest.raises(ConfigError, match="model: choose one"):
        check_config(compose(["data=math"]))
    with pytest.raises(ConfigError, match="data: choose one"):
        check_config(compose(["model=qwen3_4b"]))


def test_missing_data_file_names_the_key_and_the_prepare_command(tmp_path, monkeypatch):
    monkeypatch.setenv("RECIPES_CACHE", str(tmp_path))
    cfg = compose(["experiment=demo_cpu", "data=open_rs"])
    check_config(cfg)
    with pytest.raises(ConfigError) as err:
        check_data(cfg)
    text = str(err.value)
    assert text.startswith("data.train_files: no such file")
    assert "python -m recipes.tools.data prepare open_rs" in text


def test_bad_row_in_data_file_names_file_row_and_column(tmp_path, monkeypatch):
    import pyarrow as pa
    import pyarrow.parquet as pq

    from recipes.tools.data import write_toy_arithmetic

    monkeypatch.setenv("RECIPES_CACHE", str(tmp_path))
    cfg = compose(["experiment=demo_cpu"])
    train, test = write_toy_arithmetic(Path(cfg.data.train_files).parent, n_train=20, n_test=5)
    table = pq.read_table(train).to_pylist()
    table[3]["reward_model"] = {"style": "rule", "ground_truth": ""}
    pq.write_table(pa.Table.from_pylist(table), train)
    with pytest.raises(ConfigError) as err:
        check_data(cfg)
    assert "data.train_files" in str(err.value) and "row 3" in str(err.value)
    assert "ground_truth" in str(err.value)


def _run_cli(cache: Path, *args: str, timeout: float = 120, **env: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "recipes.train", *args],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=timeout,
        env={**os.environ, "RECIPES_CACHE": str(cache), "PYTHONPATH": str(REPO), **env},
    )


@pytest.mark.slow  # a fresh interpreter (or several) importing verl
def test_cli_rejects_a_bad_config_before_ray_starts(tmp_path):
    # No Ray: nothing of it printed and no session folder in its temporary folder (ray.init makes
    # one first thing). Rejecting takes ~10 s of CPU (importing verl), which a loaded 2-core
    # machine stretches to 40 s and more, so time is only a hang guard, not the measure.
    ray_tmp = tmp_path / "ray"
    out = _run_cli(
        tmp_path, "experiment=demo_cpu", "data.train_batch_size=6", timeout=300, RAY_TMPDIR=str(ray_tmp)
    )
    assert out.returncode == 2, out.stderr[-2000:]
    assert "config error: data.train_batch_size=6 must be a multiple" in out.stderr
    assert "Traceback" not in out.stderr and "ray" not in out.stdout.lower() and "Ray" not in out.stderr
    assert not ray_tmp.exists()


@pytest.mark.parametrize(
    ("override", "env", "message"),
    [
        (
            "actor_rollout_ref.actor.optim.lr=inf",
            {},
            "actor_rollout_ref.actor.optim.lr=inf must be a number > 0.",
        ),
        (
            "+reward.custom_reward_function.reward_kwargs.timeout_s=inf",
            {},
            "reward.custom_reward_function.reward_kwargs.timeout_s=inf must be a finite number.",
        ),
        (
            "+reward.custom_reward_function.reward_kwargs.timeout_s=1e9",
            {},
            "reward.custom_reward_function.reward_kwargs.timeout_s=1000000000.0 must be in (0, 300].",
        ),
        (
            None,
            {"RECIPES_GRADER_TIMEOUT_S": "nan"},
            "$RECIPES_GRADER_TIMEOUT_S='nan' must be a number of seconds",
        ),
        (
            None,
            {"RECIPES_GRADER_TIMEOUT_S": "abc"},
            "$RECIPES_GRADER_TIMEOUT_S='abc' must be a number of seconds",
        ),
        (  # platform=cpu sets 2 workers; null leaves it to the variable
            "reward.custom_reward_function.reward_kwargs.num_workers=null",
            {"RECIPES_GRADER_WORKERS": "0"},
            "$RECIPES_GRADER_WORKERS='0' must be an integer from 1 to 256",
        ),
    ],
)
def test_a_setting_or_variable_that_would_remove_a_limit_is_a_config_error(
    override, env, message, monkeypatch
):
    """inf passed every `> 0` check; NaN or inf in $RECIPES_GRADER_TIMEOUT_S switched the grading
    time limit off, and a non-number failed only inside a Ray worker."""
    for key, value in env.items():
        monkeypatch.setenv(key, value)
    cfg = compose(["experiment=demo_cpu", *([override] if override else [])])
    with pytest.raises(ConfigError) as err:
        check_config(cfg)
    assert str(err.value).startswith(message), str(err.value)


@pytest.mark.slow  # fresh interpreters (each ~2 s: our checks come before verl is imported)
def test_paths_that_escape_or_cannot_be_written_fail_in_one_line_and_write_nothing(tmp_path):
    """`RECIPES_CACHE=` wrote the toy data to /data/; `trainer.experiment_name=../../x` wrote
    outside outputs/; every config error left <output_dir>/hydra/ behind."""
    work = tmp_path / "work"
    work.mkdir()
    (tmp_path / "a_file").write_text("")
    cases = [
        ({"RECIPES_CACHE": ""}, [], "recipes.cache_dir='' is empty"),
        ({"RECIPES_CACHE": "/proc/x"}, [], "recipes.cache_dir=/proc/x: cannot write there"),
        (
            {},
            ["trainer.experiment_name=../../../../x"],
            "trainer.experiment_name='../../../../x' must be a plain name",
        ),
        ({}, ["trainer.project_name=/abs"], "trainer.project_name='/abs' must be a plain name"),
        ({}, [f"recipes.output_dir={tmp_path / 'a_file'}"], "that is a file, not a folder"),
        ({}, [f"recipes.output_dir={tmp_path / 'a_file' / 'x'}"], "cannot write there"),
        # fails later, in the checks inside Hydra's main: the folder Hydra made is removed again
        (
            {},
            [f"recipes.output_dir={tmp_path / 'new'}", "trainer.total_epochs=0"],
            "trainer.total_epochs=0 must be",
        ),
    ]
    for env, args, message in cases:
        proc = subprocess.run(
            [sys.executable, "-m", "recipes.train", "experiment=demo_cpu", *args],
            cwd=work,
            capture_output=True,
            text=True,
            timeout=120,
            # this checkout's code whatever the working folder (a worktree shares the venv)
            env={**os.environ, "PYTHONPATH": str(REPO), "RECIPES_CACHE": str(tmp_path / "cache"), **env},
        )
        assert proc.returncode == 2 and proc.stderr.startswith("config error: "), (args, proc.stderr[-2000:])
        assert message in proc.stderr and len(proc.stderr.strip().splitlines()) == 1, proc.stderr[-2000:]
        assert sorted(p.name for p in tmp_path.iterdir()) == ["a_file", "work"], args
        assert not any(work.iterdir()), args
    assert not Path("/data/toy_arithmetic").exists()


@pytest.mark.slow  # one fresh interpreter importing verl
def test_configs_that_used_to_start_ray_or_crash_are_one_config_error_line(
    recipes_cache, tiny_model, tmp_path, capsys
):
    """Accepted before (Ray would have started): a response longer than the model's context, a
    logger verl does not have. Tracebacks before: a config file that is not YAML, an
    interpolation that cannot resolve."""
    from recipes.train import check_overrides, verl_searchpath

    # the command itself, once: it fails in the model check, after verl's, and writes nothing
    out = tmp_path / "out"
    proc = _run_cli(
        recipes_cache, "experiment=demo_cpu", "data.max_response_length=100000", f"recipes.output_dir={out}"
    )
    assert proc.returncode == 2 and len(proc.stderr.strip().splitlines()) == 1, proc.stderr[-2000:]
    assert (
        "config error: data.max_prompt_length + data.max_response_length = 128 + 100000 = 100128 tokens "
        in (proc.stderr)
        and f"is more than the model's context of 2048 ({tiny_model / 'config.json'})" in proc.stderr
    )
    assert not out.exists()

    with pytest.raises(ConfigError, match=r"trainer.logger: 'nosuchlogger' is not one of verl's \["):
        check_config(compose(["experiment=demo_cpu", "trainer.logger=[file,nosuchlogger]"]))

    mine = tmp_path / "mine" / "experiment"
    mine.mkdir(parents=True)
    (mine / "unclosed.yaml").write_text("defaults:\n  - demo_cpu\ntrainer: [unclosed\n")
    (mine / "tab.yaml").write_text("a: 1\n\tb: 2\n")
    (mine / "duplicate.yaml").write_text("a: 1\na: 2\n")
    verl = verl_searchpath().split("=", 1)[1][2:-2]  # file://... of verl's configs
    ours = f"hydra.searchpath=['{verl}','file://{tmp_path / 'mine'}']"
    for args, message in [
        ([ours, "experiment=unclosed"], "not valid YAML: while parsing a flow sequence"),
        ([ours, "experiment=tab"], "not valid YAML: while scanning for the next token"),
        ([ours, "experiment=duplicate"], "not valid YAML"),
        (
            ["experiment=demo_cpu", "trainer.project_name=${oc.env:RECIPES_TEST_UNSET}"],
            "Environment variable 'RECIPES_TEST_UNSET' not found",
        ),
    ]:
        with pytest.raises(SystemExit) as exit_:
            check_overrides(args)
        err = capsys.readouterr().err
        assert exit_.value.code == 2 and err.startswith("config error: ") and message in err, (args, err)
        assert len(err.strip().splitlines()) == 1, err


@pytest.mark.slow  # a fresh interpreter (or several) importing verl
def test_cfg_job_prints_the_resolved_config_without_running(tmp_path):
    # an override after the flag: Hydra itself refuses that order
    out = _run_cli(tmp_path, "experiment=demo_cpu", "--cfg", "job", "model=smollm2_135m")
    assert out.returncode == 0, out.stderr[-2000:]
    assert "name: vllm" in out.stdout and "smollm2_135m" in out.stdout
    # resolved, as docs/running.md says (Hydra prints outputs/${trainer.project_name}/...)
    assert "\n  output_dir: outputs/verl_math_recipes/demo_cpu\n" in out.stdout
    assert not (tmp_path / "models").exists()  # printing builds nothing


def test_step_table_row_formats_present_and_missing_metrics():
    row = format_row(3, {"critic/score/mean": 0.25, "grader/acc": 0.125, "timing_s/step": 2.5})
    cells = row.split()
    assert cells[:3] == ["3", "0.250", "0.125"] and cells[-2:] == ["2.5", "-"] and cells.count("-") == 4
    assert len(row) == len(header()) and header().split()[-1] == "eta"
    assert format_row(3, {}, eta_s=725.0).split()[-1] == "12m05s"


def test_the_eta_is_the_steps_left_times_the_launchs_median_step_after_its_first():
    assert eta(1, 10, [30.0]) == 9 * 30.0  # one step: it is all there is
    assert eta(4, 10, [30.0, 2.0, 4.0, 3.0]) == 6 * 3.0  # the warm-up step left out, the median
    assert eta(10, 10, [30.0, 3.0]) == 0.0
    assert eta(3, None, [3.0]) is None and eta(3, 10, []) is None
    assert [format_duration(x) for x in (None, 44.6, 60, 3599, 3600, 11220)] == [
        "-",
        "45s",
        "1m00s",
        "59m59s",
        "1h00m",
        "3h07m",
    ]


def test_the_planned_step_count_is_verls(tmp_path):
    import pyarrow as pa
    import pyarrow.parquet as pq

    assert planned_steps(compose(["experiment=demo_cpu"])) == 5
    train = tmp_path / "train.parquet"
    pq.write_table(pa.table({"x": list(range(11))}), train)
    base = ["experiment=demo_cpu", "trainer.total_training_steps=null", f"data.train_files={train}"]
    # epochs x (rows // batch): verl drops the last partial batch; train_max_samples caps the rows
    assert planned_steps(compose([*base, "trainer.total_epochs=2"])) == 2 * (11 // 4)
    assert planned_steps(compose([*base, "trainer.total_epochs=1", "data.train_max_samples=8"])) == 2
    missing = [
        "experiment=demo_cpu",
        "trainer.total_training_steps=null",
        f"data.train_files={tmp_path / 'x.parquet'}",
    ]
    assert planned_steps(compose(missing)) is None  # no ETA, and no error: the data checks say what is wrong


@pytest.mark.parametrize("model", ["qwen3_1_7b", "qwen3_4b", "llama3_2_1b", "llama3_2_3b"])
def test_ta_grpo_presets_for_the_papers_four_models(model):
    """TA-GRPO's settings as the authors' script runs them (lhkhiem28/TA-GRPO@09719bf), for each of the paper's models (the model is an override); their numbers one by one: tests/test_ta_preset.py."""
    cfg = compose(["experiment=ta_grpo_math", f"model={model}"])
    check_config(cfg)
    actor, rollout = cfg.actor_rollout_ref.actor, cfg.actor_rollout_ref.rollout
    # their 256 rows of (question, variant) a step = 32 questions x 8 variants, each answered G=8 times
    assert (cfg.data.train_batch_size, actor.ppo_mini_batch_size, rollout.n) == (32, 16, 64)
    assert (actor.optim.lr_warmup_steps_ratio, actor.optim.lr_scheduler_type) == (0.1, "cosine")
    paper = compose(["experiment=ta_grpo_math_256q", f"model={model}"])
    check_config(paper)
    p = paper.actor_rollout_ref.actor
    assert (paper.data.train_batch_size, p.ppo_mini_batch_size, p.optim.lr_scheduler_type) == (
        256,
        128,
        "constant",
    )
    assert (cfg.data.max_prompt_length, cfg.data.max_response_length, cfg.trainer.total_epochs) == (
        512,
        3072,
        2,
    )
    assert (actor.optim.lr, actor.clip_ratio_low, actor.clip_ratio_high) == (1e-6, 0.2, 0.2)
    assert actor.use_kl_loss and actor.kl_loss_type == "low_var_kl" and actor.kl_loss_coef == 0.001
    assert actor.loss_agg_mode == "token-mean"
    assert dict(cfg.recipes.ta_grpo) == {
        "n_rephrasings": 7,
        "anchor": "original",
        "groups": "pooled",
        "group_size": 8,
    }
    star = compose(["experiment=ta_grpo_star_math", f"model={model}"])
    assert (star.recipes.ta_grpo.anchor, star.recipes.ta_grpo.groups) == ("own", "per_variant")
    for base in ("ta_grpo_baseline_grpo_math", "ta_grpo_baseline_grpo_ds_math"):
        b = compose([f"experiment={base}", f"model={model}"])
        check_config(b)
        assert b.actor_rollout_ref.rollout.n == 8 and "ta_grpo" not in b.recipes.methods
        # as many responses a step as TA-GRPO's: 256 questions x 8 = 32 x 64
        assert b.data.train_batch_size * 8 == cfg.data.train_batch_size * 64
        assert b.algorithm.filter_groups.enable == base.endswith("_ds_math")
    # Qwen3's chat template at its default (thinking), as the authors' script leaves it
    for c in (cfg, paper, star, b):
        assert dict(c.data.apply_chat_template_kwargs) == {}


def test_cw_grpo_presets():
    cfg = compose(["experiment=cw_grpo_open_rs"])
    check_config(cfg)
    actor, rollout = cfg.actor_rollout_ref.actor, cfg.actor_rollout_ref.rollout
    assert actor.policy_loss.loss_mode == "cw_grpo-seqlogp-allpos-grad" and "cw_grpo" in cfg.recipes.methods
    assert (rollout.n, rollout.temperature, actor.optim.lr, cfg.trainer.total_training_steps) == (
        12,
        0.7,
        1e-6,
        100,
    )
    assert (cfg.data.max_prompt_length, cfg.data.max_response_length) == (512, 4096)
    assert cfg.data.train_batch_size * rollout.n == 144  # 12 per device x 4 accumulation x 3 processes
    # micro-batches of at most 16,384 tokens (the authors' 12 x 4,608 would not fit an 80 GB GPU)
    assert actor.use_dynamic_bsz and actor.ppo_max_token_len_per_gpu == 16384
    assert (actor.optim.lr_warmup_steps_ratio, actor.optim.lr_scheduler_type) == (0.1, "cosine")
    seven = compose(["experiment=cw_grpo_open_rs_7b"])
    check_config(seven)
    assert seven.actor_rollout_ref.model.path == "Qwen/Qwen2.5-Math-7B-Instruct"
    assert seven.data.max_response_length == 3584 and seven.trainer.n_gpus_per_node == 4
    assert seven.actor_rollout_ref.actor.fsdp_config.optimizer_offload
    grpo = compose(["experiment=cw_grpo_baseline_grpo_open_rs"])
    clip = compose(["experiment=cw_grpo_baseline_clip_cov_open_rs"])
    assert grpo.actor_rollout_ref.actor.policy_loss.loss_mode == "vanilla"
    assert clip.actor_rollout_ref.actor.policy_loss.loss_mode == "clip_cov"
    for base in (grpo, clip):
        check_config(base)
        assert "cw_grpo" not in base.recipes.methods and base.actor_rollout_ref.rollout.n == 12
    options = [
        f"recipes.cw_grpo.{k}=true" for k in ("logp_per_sequence", "all_positions", "grad_through_weights")
    ]
    authors = compose(["experiment=demo_cpu", "method=[dr_grpo,cw_grpo]", *options])
    check_config(authors)
    assert authors.actor_rollout_ref.actor.policy_loss.loss_mode == "cw_grpo-seqlogp-allpos-grad"
    # the loss name of the string grammar, accepted for one release: it sets the settings
    old = compose(
        [
            "experiment=demo_cpu",
            "method=[dr_grpo,cw_grpo]",
            "actor_rollout_ref.actor.policy_loss.loss_mode=cw_grpo-seqlogp-grad",
        ]
    )
    assert dict(old.recipes.cw_grpo) == {
        "logp_per_sequence": True,
        "all_positions": False,
        "grad_through_weights": True,
    }


def test_prorl_method_and_preset():
    cfg = compose(["experiment=demo_cpu", "method=[dapo,prorl]"])
    check_config(cfg)
    actor = cfg.actor_rollout_ref.actor
    # the KL term of the report: k3, beta 1e-4, on top of DAPO (which had switched it off)
    assert (actor.use_kl_loss, actor.kl_loss_type, actor.kl_loss_coef) == (True, "low_var_kl", 1e-4)
    assert actor.clip_ratio_high == 0.28 and cfg.recipes.prorl.reset_every == 200

    cfg = compose(["experiment=prorl_deepseek_r1_distill_qwen_1_5b"])
    actor, rollout = cfg.actor_rollout_ref.actor, cfg.actor_rollout_ref.rollout
    assert (actor.clip_ratio_low, actor.clip_ratio_high, actor.kl_loss_coef) == (0.2, 0.4, 1e-4)
    assert cfg.algorithm.filter_groups.enable and rollout.n == 16 and rollout.temperature == 1.2
    assert (cfg.data.train_batch_size, actor.ppo_mini_batch_size) == (256, 64)
    assert (actor.optim.lr, actor.optim.lr_scheduler_type) == (2e-6, "constant")
    assert cfg.data.max_prompt_length + cfg.data.max_response_length == 8096
    assert cfg.trainer.nnodes * cfg.trainer.n_gpus_per_node == 32
    assert cfg.recipes.prorl.val_metric == "val-core/math500/acc/mean@8" and cfg.trainer.test_freq > 0
    assert cfg.actor_rollout_ref.model.path == "deepseek-ai/DeepSeek-R1-Distill-Qwen-1.5B"
    # a bounded default length: 2,000 steps, a save every 20 (~384 GiB with retention, recipes.plan)
    assert (cfg.trainer.total_training_steps, cfg.trainer.save_freq) == (2000, 20)


@pytest.mark.parametrize("baseline", ["grpo", "dapo", "dr_grpo"])
def test_all_four_methods_compose_on_every_baseline(baseline):
    cfg = compose(
        [
            "experiment=demo_cpu_ta_grpo",
            f"method=[{baseline},prompt_aug,ta_grpo,cw_grpo,prorl]",
            "data.max_prompt_length=320",
        ]
    )
    check_config(cfg)
    assert set(cfg.recipes.methods) == {baseline, "prompt_aug", "ta_grpo", "cw_grpo", "prorl"}
    actor = cfg.actor_rollout_ref.actor
    assert actor.policy_loss.loss_mode == "cw_grpo" and actor.use_kl_loss and actor.kl_loss_coef == 1e-4
    assert cfg.actor_rollout_ref.rollout.agent.default_agent_loop == "recipes_prompt_variants"


ADD_ONS = ["prompt_aug", "ta_grpo", "cw_grpo", "prorl"]


@pytest.mark.parametrize("baseline", ["grpo", "dapo", "dr_grpo"])
@pytest.mark.parametrize("add_on", ADD_ONS)
def test_the_order_of_the_method_list_changes_nothing(baseline, add_on):
    """Hydra merges a list group's files in list order, so `method=[prorl,grpo]` once took GRPO's
    kl_loss_coef 0.001 and `method=[grpo,prorl]` ProRL's 1e-4 (recipes/methods/configure.py). Both
    orders of every baseline and add-on now compose the same config, to the last key."""
    run = ["model=tiny", "data=toy_arithmetic", "data.max_prompt_length=320"]
    first = compose([*run, f"method=[{baseline},{add_on}]"])
    second = compose([*run, f"method=[{add_on},{baseline}]"])
    assert OmegaConf.to_yaml(first) == OmegaConf.to_yaml(second)  # as config.yaml saves it
    actor, rollout = first.actor_rollout_ref.actor, first.actor_rollout_ref.rollout
    if add_on == "prorl":  # the report's k3 KL at beta 1e-4, over each baseline's own KL setting
        assert (actor.use_kl_loss, actor.kl_loss_type, actor.kl_loss_coef) == (True, "low_var_kl", 1e-4)
    if add_on == "cw_grpo":
        assert actor.policy_loss.loss_mode == "cw_grpo"
    if add_on == "ta_grpo":  # (N+1) x G = 4 x 8, and the rollout's log-probs (under q_v) off
        assert (rollout.n, rollout.calculate_log_probs) == (32, False)
    check_config(second)


def test_every_add_on_in_any_order_composes_the_same():
    orders = ["dapo,prompt_aug,ta_grpo,cw_grpo,prorl", "prorl,cw_grpo,ta_grpo,prompt_aug,dapo"]
    run = ["experiment=demo_cpu", "data.max_prompt_length=320"]
    a, b = (compose([*run, f"method=[{order}]"]) for order in orders)
    assert OmegaConf.to_container(a) == OmegaConf.to_container(b)  # (settings sections in list order)
    assert (
        list(a.recipes.methods)
        == list(b.recipes.methods)
        == ["dapo", "prompt_aug", "ta_grpo", "cw_grpo", "prorl"]
    )
    # demo_cpu sets rollout.n=8 itself, so TA-GRPO's G follows it: (3+1) x 2
    assert (a.actor_rollout_ref.rollout.n, a.recipes.ta_grpo.group_size) == (8, 2)


def test_a_value_a_preset_or_the_command_line_gives_beats_an_add_ons_setting():
    """An add-on sets its verl keys from its settings unless the preset or the command line sets the
    key more directly: then the setting follows the key (the command line over a preset)."""
    prorl = compose(
        ["experiment=prorl_deepseek_r1_distill_qwen_1_5b", "actor_rollout_ref.actor.kl_loss_coef=0.002"]
    )
    assert (prorl.actor_rollout_ref.actor.kl_loss_coef, prorl.recipes.prorl.kl_coef) == (0.002, 0.002)
    demo = compose(["experiment=demo_cpu_prorl"])  # the preset's recipes.prorl.kl_coef
    assert demo.actor_rollout_ref.actor.kl_loss_coef == 0.001
    # a preset's KL for its baseline, with ProRL added on the command line: the preset's value stays
    ta = compose(["experiment=ta_grpo_math", "method=[grpo,ta_grpo,prorl]"])
    assert (ta.actor_rollout_ref.actor.kl_loss_coef, ta.recipes.prorl.kl_coef) == (0.001, 0.001)
    # TA-GRPO: the preset sets G, the command line N: rollout.n follows both
    n = compose(["experiment=ta_grpo_math", "recipes.ta_grpo.n_rephrasings=3"]).actor_rollout_ref.rollout.n
    assert n == 32
    # demo_cpu's rollout.n=8 is a preset's; G on the command line is more direct
    g = compose(["experiment=demo_cpu", "method=[grpo,ta_grpo]", "recipes.ta_grpo.group_size=4"])
    assert g.actor_rollout_ref.rollout.n == 16


def test_a_wrong_verl_or_a_missing_registration_is_one_sentence(monkeypatch):
    import verl
    from verl.experimental.reward_loop.reward_manager.registry import REWARD_MANAGER

    from recipes.verl_seam import seam_in_process as verl_seam  # the fresh interpreter's part:
    # tests/test_adding_a_method.py

    verl_seam()  # this install is right
    monkeypatch.setattr(verl, "__version__", "0.9.2")
    with pytest.raises(ConfigError, match=r"^verl 0\.9\.2 is installed; this project extends verl 0\.9\.1"):
        verl_seam()
    monkeypatch.undo()
    monkeypatch.delitem(REWARD_MANAGER, "math_pool")
    with pytest.raises(
        ConfigError, match=r"did not register our reward manager 'math_pool': is this package"
    ):
        verl_seam()


@pytest.mark.slow  # two fresh interpreters importing verl
def test_a_passed_seam_check_is_kept_for_the_same_code_and_a_failed_one_is_not(tmp_path, monkeypatch):
    import importlib.metadata
    import shutil

    from recipes import verl_seam
    from recipes.methods import manifest

    monkeypatch.setenv("RECIPES_CACHE", str(tmp_path / "cache"))
    monkeypatch.setattr(verl_seam.VerlSeam, "passed", set())  # as a process that checked nothing yet
    first = verl_seam.VerlSeam()
    assert first.proc is not None  # an empty cache: the fresh interpreter runs
    first.join()
    kept = tmp_path / "cache" / "seam"
    assert [p.name for p in kept.iterdir()] == [f"{first.key}.passed"]
    monkeypatch.setattr(verl_seam.VerlSeam, "passed", set())  # the next launch, a new process
    assert verl_seam.VerlSeam().proc is None

    # a declaration verl's workers would not get: checked again, refused, and not kept
    names = manifest.expected_names()
    monkeypatch.setattr(
        manifest, "expected_names", lambda: [*names, ("policy_loss", "unwired_probe", "grpo")]
    )
    with pytest.raises(ConfigError, match="does not get the policy loss 'unwired_probe' of method grpo"):
        verl_seam.VerlSeam().join()
    assert [p.name for p in kept.iterdir()] == [f"{first.key}.passed"]

    # the key: the declarations, any source file of ours (every package of this project, none of
    # site-packages), the working folder, PYTHONPATH, what is installed; each changed alone
    ours = verl_seam.packages(importlib.metadata.entry_points(group="verl.plugins"))
    assert {p.name for p in ours} >= {"recipes", "rewards", "prompt_aug", "eval"}
    assert all(p.parent == REPO for p in ours)
    src = tmp_path / "src" / "recipes"
    shutil.copytree(REPO / "recipes", src, ignore=shutil.ignore_patterns("__pycache__"))
    base = verl_seam.fingerprint(first.expected, [src])
    assert verl_seam.fingerprint(first.expected, [src]) == base
    assert verl_seam.fingerprint(json.dumps(names[:-1]), [src]) != base
    loss = src / "methods" / "cw_grpo.py"
    loss.write_text(loss.read_text().replace("def ", "def  ", 1))
    assert verl_seam.fingerprint(first.expected, [src]) != base
    loss.write_text(loss.read_text().replace("def  ", "def ", 1))
    assert verl_seam.fingerprint(first.expected, [src]) == base
    site = tmp_path / "site"
    (site / "upgraded_probe-1.0.dist-info").mkdir(parents=True)
    (site / "upgraded_probe-1.0.dist-info" / "METADATA").write_text("Name: upgraded-probe\nVersion: 1.0\n")
    for change in (
        lambda m: m.chdir(tmp_path),
        lambda m: m.setenv("PYTHONPATH", str(tmp_path / "src")),
        lambda m: m.syspath_prepend(str(site)),  # a distribution installed
    ):
        with monkeypatch.context() as m:
            change(m)
            assert verl_seam.fingerprint(first.expected, [src]) != base
    assert verl_seam.fingerprint(first.expected, [src]) == base
    # ... but not the folder `import ray` adds to sys.path, which a fresh interpreter has not
    ray_site = tmp_path / "ray" / "thirdparty_files"
    shutil.copytree(site, ray_site)
    with monkeypatch.context() as m:
        m.syspath_prepend(str(ray_site))
        assert verl_seam.fingerprint(first.expected, [src]) == base


@pytest.mark.slow  # a fresh interpreter (or several) importing verl
def test_hydras_own_errors_are_one_line_and_exit_2(tmp_path):
    for args, message in [
        (["model=nope"], "config error: In 'ppo_trainer': Could not find 'model/nope' Available options"),
        (
            ["trainer.total_trainig_steps=3"],
            "config error: Could not override 'trainer.total_trainig_steps'.",
        ),
        (["trainer.logger=[a"], "config error: no viable alternative at input '[a'"),
    ]:
        out = _run_cli(tmp_path, "experiment=demo_cpu", *args)
        assert out.returncode == 2, out.stderr[-2000:]
        errors = [line for line in out.stderr.splitlines() if "error:" in line.lower()]
        assert len(errors) == 1 and errors[0].startswith(message), errors
        assert "engine is not available" not in out.stderr
        assert "Config search path" not in out.stderr and "Traceback" not in out.stderr


def test_a_model_path_that_does_not_resolve_is_refused(tmp_path, monkeypatch):
    from recipes.checks import check_model

    with pytest.raises(ConfigError, match=r"model.path=/no/such/model: no model there"):
        check_model(compose(["experiment=demo_cpu", "actor_rollout_ref.model.path=/no/such/model"]))
    (tmp_path / "empty").mkdir()
    with pytest.raises(ConfigError, match="no model there"):
        check_model(compose(["experiment=demo_cpu", f"actor_rollout_ref.model.path={tmp_path / 'empty'}"]))
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("HF_HOME", str(tmp_path / "hf"))
    with pytest.raises(ConfigError, match="not in the local Hugging Face cache, and HF_HUB_OFFLINE is set"):
        check_model(compose(["experiment=demo_cpu", "actor_rollout_ref.model.path=someorg/no-such-model"]))


def test_a_finished_run_is_recognised_before_anything_starts(tmp_path):
    from recipes.train import finished_step

    def cfg(*extra):
        return compose(["experiment=demo_cpu", f"recipes.output_dir={tmp_path}", *extra])

    assert finished_step(cfg("trainer.total_training_steps=3")) is None  # no checkpoint yet
    (tmp_path / "checkpoints").mkdir()
    (tmp_path / "checkpoints" / "latest_checkpointed_iteration.txt").write_text("2")
    assert finished_step(cfg("trainer.total_training_steps=3")) is None  # resumes at step 3
    (tmp_path / "checkpoints" / "latest_checkpointed_iteration.txt").write_text("3")
    assert finished_step(cfg("trainer.total_training_steps=3")) == 3
    assert finished_step(cfg("trainer.total_training_steps=4")) is None  # more steps asked for
    assert finished_step(cfg("trainer.total_training_steps=3", "trainer.resume_mode=disable")) is None


def test_help_is_a_short_usage_with_examples_and_every_group_option():
    proc = subprocess.run(
        [sys.executable, "-m", "recipes.train", "--help"],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 0 and proc.stderr == ""
    lines = proc.stdout.splitlines()
    assert lines[0].startswith("usage: python -m recipes.train") and len(lines) < 40
    for group in ("experiment", "model", "data", "platform", "method"):
        for option in (REPO / "configs" / group).glob("*.yaml"):
            assert option.stem in proc.stdout, option


def test_cpu_runs_are_deterministic_and_gpu_runs_are_not_by_default():
    cpu = compose(["experiment=demo_cpu"])
    assert cpu.recipes.deterministic and not cpu.actor_rollout_ref.rollout.enable_chunked_prefill
    gpu = compose(["experiment=prompt_aug_qwen2_5_math_1_5b"])
    assert not gpu.recipes.deterministic and gpu.actor_rollout_ref.rollout.enable_chunked_prefill
    # chunked prefill with seeds is only refused on vLLM's CPU build
    check_config(compose(["experiment=prompt_aug_qwen2_5_math_1_5b", "recipes.deterministic=true"]))
    for cfg in (cpu, gpu):  # every run goes through our agent loop, with or without methods
        assert cfg.actor_rollout_ref.rollout.agent.default_agent_loop == "recipes_prompt_variants"


def test_without_chunked_prefill_vllm_gets_a_batch_as_long_as_a_sequence(monkeypatch):
    """vLLM refuses max_num_batched_tokens < max_model_len without chunked prefill, and verl's own
    fix fails on its frozen config: recipes.train sets both before Ray starts."""
    from recipes.platforms import determinism

    for name in determinism.ENV:  # prepare() exports these only where unset: keep the test's env
        monkeypatch.setenv(name, "test")

    def lengths(*overrides: str) -> tuple[int, int]:
        cfg = compose(["experiment=demo_cpu", *overrides])
        determinism.prepare(cfg)
        return (
            cfg.actor_rollout_ref.rollout.max_model_len,
            cfg.actor_rollout_ref.rollout.max_num_batched_tokens,
        )

    assert lengths() == (160, 1024)  # 128 + 32 tokens
    assert lengths("data.max_prompt_length=2000") == (2032, 2032)
    gpu = compose(["experiment=prompt_aug_qwen2_5_math_1_5b"])  # chunked prefill on: left to vLLM
    determinism.prepare(gpu)
    assert gpu.actor_rollout_ref.rollout.max_model_len is None
