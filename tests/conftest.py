"""Shared fixtures. Tests run with `--import-mode=importlib` (see pyproject): verl's wheel ships
top-level `tests`/`scripts` packages, so nothing here is imported under those names."""

import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path
from types import SimpleNamespace

import pytest
from script_module import load_script  # tests/script_module.py

from recipes.platforms.cpu_vllm import carries, held_open, shm_files
from rewards.grade import Grader

REPO = Path(__file__).resolve().parent.parent


@pytest.fixture(autouse=True)
def environment_as_it_was():
    """What a test sets in os.environ is gone after it: recipes.train's preparation before Ray
    (the CPU platform, recipes.deterministic, the entropy flag), an in-process vLLM engine's OpenMP
    settings. Every later launch of the session inherits this process's environment: one that
    inherited RECIPES_ENTROPY_NO_GRAD=1 from tests/test_run_folder.py trained without its entropy
    bonus's gradient, and a resumed run no longer repeated the uninterrupted one."""
    saved = dict(os.environ)
    yield
    if dict(os.environ) != saved:
        os.environ.clear()
        os.environ.update(saved)


@pytest.fixture(scope="module")
def grader():
    """A 2-worker grader with a 2 s limit: short enough to keep the suite fast, long enough that
    no honest sample on a busy 2-core CI machine comes near it."""
    g = Grader(num_workers=2, timeout_s=2.0)
    yield g
    g.close()


@pytest.fixture(scope="session", autouse=True)
def no_shared_memory_left_behind():
    """Processes the tests kill (grading workers past their time limit, Ray's and vLLM's processes)
    never unlink their multiprocessing semaphores and shared memory: at the end of the session,
    remove those that appeared during it and that no live process holds."""
    from recipes.platforms.cpu_vllm import remove_orphans, shm_files

    before = shm_files()
    yield
    remove_orphans({n for n in shm_files() - before if n.startswith(("psm_", "sem.mp-"))}, wait_s=5.0)


# ------------------------------------------------------------------ end-to-end training runs
def litter() -> set[str]:
    """What a run could leave behind: files in /dev/shm (shared memory of killed processes), in
    ~/.cache (vLLM's compile cache, HF datasets' cache) and vLLM's sockets in the temp folder."""
    found = {f"/dev/shm/{p.name}" for p in Path("/dev/shm").glob("*")}
    found |= {str(p) for p in (Path.home() / ".cache").glob("*")}
    found |= {str(p) for p in Path(tempfile.gettempdir()).glob("*-*-*-*-*") if p.is_socket()}
    return found


def not_ours() -> set[str]:
    """The /dev/shm files (as `litter` names them) that a launch may not be blamed for when another
    pytest-xdist worker runs tests beside it: those that no process of this worker holds. Its
    processes, a launch's included, carry this worker's PYTEST_XDIST_WORKER (recipes.platforms.cpu_vllm's
    `carries`); the other worker's tests kill graders on purpose, whose semaphores nobody holds
    until its session removes them, and such a file cannot be traced to its maker. A file that a
    process of the launch still holds (an engine core that outlived the run) still counts; a run
    on one worker checks all."""
    worker = os.environ.get("PYTEST_XDIST_WORKER")
    if not worker:
        return set()
    mark, held = f"PYTEST_XDIST_WORKER={worker}", held_open()
    return {f"/dev/shm/{n}" for n in shm_files() if not any(carries(pid, mark) for pid in held.get(n, ()))}


@pytest.fixture(scope="session")
def rows_independent_of_batch() -> bool:
    """Whether vLLM's CPU matmul (oneDNN, float32) gives every row the same bits whatever the number
    of rows computed with it. Where it does (the AVX-512 Xeons the bit-for-bit tests were written on),
    a request's log-probs do not depend on the requests sharing its engine step. On an AVX2-only AMD
    EPYC they do, in the last bits: rows go in tiles of 6 and blocks of 48, a last tile of 1-3 rows
    takes another kernel, and larger calls (from 240-485 rows, by the layer's shape) another
    algorithm. Compares every row of calls of 2-100 rows and of seven larger ones up to 600 with the
    same row computed alone, for two of SmolLM2-135M's layer shapes (scripts/bench/cpu_matmul_rows.py,
    which prints the same comparison for every row count)."""
    import torch

    bench = load_script(REPO / "scripts/bench/cpu_matmul_rows.py")
    g = torch.Generator().manual_seed(0)
    counts = (*range(2, 101), 127, 241, 300, 340, 486, 512, 600)
    return not any(
        bench.differing_calls(
            bench.onednn_linear(*bench.SHAPES[name], g), torch.randn(600, 576, generator=g), counts
        )
        for name in ("o", "gate_up")
    )


@pytest.fixture(scope="session")
def shm_not_ours():
    """`not_ours`, for a test module that watches /dev/shm around a launch of its own."""
    return not_ours


def train(cache: Path, out: Path, method: str, steps: int, *extra: str) -> subprocess.CompletedProcess:
    """`python -m recipes.train experiment=demo_cpu method=[METHOD]` for `steps` steps with the
    `extra` overrides, a checkpoint (incl. verl's HF weights) and a rollout dump every step; fails
    the test if the run fails or leaves anything behind."""
    env = {**os.environ, "RECIPES_CACHE": str(cache), "RAY_DEDUP_LOGS": "0"}
    before = litter()
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
    cmd = [sys.executable, "-m", "recipes.train", *args]
    # A launch takes 1-3 minutes on 2 cores, most of it start-up; beside the other worker's
    # heaviest tests, up to 10. The limit is for a hang, not for a busy machine.
    proc = subprocess.run(cmd, cwd=REPO, env=env, capture_output=True, text=True, timeout=900)
    assert proc.returncode == 0, (proc.args, proc.stdout[-3000:], proc.stderr[-6000:])
    left = litter() - before - not_ours()
    assert not left, f"the run left {sorted(left)}"
    return proc


def copy_checkpoints(src: Path, dst: Path, upto: int) -> None:
    """A run interrupted after step `upto`: its checkpoints 1..upto and the tracker file."""
    (dst / "checkpoints").mkdir(parents=True)
    for step in range(1, upto + 1):
        name = f"global_step_{step}"
        shutil.copytree(src / "checkpoints" / name, dst / "checkpoints" / name)
    (dst / "checkpoints" / "latest_checkpointed_iteration.txt").write_text(str(upto))


# An entropy bonus gives every step a gradient, even one whose groups all tie on reward: every step
# after the first then samples from weights the previous update changed.
ENTROPY_BONUS = "actor_rollout_ref.actor.entropy_coeff=0.01"
# The reference run: GRPO with three methods on top, each checked from its rollout dump and metrics
# (tests/test_train_e2e.py): prompt augmentation with a template per rollout; TA-GRPO* (each
# variant anchored on its own prompt, one group per variant); ProRL resetting every 2 steps. 8
# rows, 4 per step, 4 steps: steps 3 and 4 are epoch 1; validation at steps 3 and 4 on 4 test
# rows. Sampled at temperature 1 with a seed per request (recipes.deterministic, on with
# platform=cpu): a fresh launch resumed after step 3 must repeat step 4 bit for bit
# (tests/test_train_e2e.py). The longest template is 276 tiny-tokenizer tokens.
REFERENCE_METHODS = "grpo,prompt_aug,ta_grpo,prorl"
REFERENCE_STEPS = 4
REFERENCE = (
    ENTROPY_BONUS,
    "recipes.prompt_aug.sampling=per_rollout",
    "recipes.ta_grpo.anchor=own",
    "recipes.ta_grpo.groups=per_variant",
    # TA-GRPO* generates with the prompt it trains on, so the rollout's log-probs are comparable
    # with the actor's (tests/test_train_e2e.py checks the weight sync with them)
    "actor_rollout_ref.rollout.calculate_log_probs=true",
    "recipes.prorl.reset_every=2",
    "actor_rollout_ref.actor.optim.lr=1e-3",
    "actor_rollout_ref.actor.kl_loss_coef=0.001",
    "data.max_prompt_length=320",
    "data.train_max_samples=8",
    "trainer.total_epochs=2",
    "trainer.test_freq=3",
    "data.val_max_samples=4",
)


# The learning benchmark's own command (scripts/bench/learning.py, the README's figure) on the tiny
# model, all four methods in one run, 3 steps: tests/test_learning_bench.py checks the benchmark on
# it (held-out sets, evaluations, report) and tests/test_train_e2e.py the four methods training
# together (one launch carries both; a launch costs about 100 CPU-seconds). TA-GRPO as the paper
# runs it (pooled groups, ratios under the original question); ProRL resetting after step 2, with
# the entropy bonus and lr 1e-3 so that one update moves step 2's KL visibly above 0; the rollouts
# dumped every step; 8 held-out questions; a checkpoint and its evaluation after the last step.
LEARNING_STEPS, LEARNING_HELD_OUT = 3, 8


def learning_command(out: Path, *flags: str) -> list[str]:
    """`python scripts/bench/learning.py` of the shared learning run into `out`, with `flags` (a
    rerun, --report-only) before the recipes.train overrides."""
    script = REPO / "scripts" / "bench" / "learning.py"
    steps = str(LEARNING_STEPS)
    cmd = [sys.executable, str(script), "--methods", "all", "--model", "tiny", "--steps", steps]
    cmd += ["--eval-every", steps, "--pass-k", "0", "--eval-backend", "hf", "--limit", str(LEARNING_HELD_OUT)]
    cmd += ["--out", str(out), *flags]
    return cmd + [
        ENTROPY_BONUS,
        "actor_rollout_ref.actor.optim.lr=1e-3",
        "recipes.prorl.reset_every=2",  # (the benchmark's own is 10: the override given wins)
        f"trainer.rollout_data_dir={out}/runs/all/rollouts",
    ]


@pytest.fixture(scope="session", autouse=True)
def recipes_cache(tmp_path_factory) -> Path:
    """The session's RECIPES_CACHE: models and data built once for every test that uses them, and
    vLLM's cache (recipes/platforms/cpu_vllm.py); set for the whole session, so no test writes to the user's
    ~/.cache/verl_math_recipes."""
    if os.environ.get("PYTEST_XDIST_WORKER"):  # `make test`'s workers share one (builds are locked)
        path = tmp_path_factory.getbasetemp().parent / "recipes_cache"
        path.mkdir(exist_ok=True)
    else:
        path = tmp_path_factory.mktemp("recipes_cache")
    saved = os.environ.get("RECIPES_CACHE")
    os.environ["RECIPES_CACHE"] = str(path)
    yield path
    if saved is None:
        os.environ.pop("RECIPES_CACHE", None)
    else:
        os.environ["RECIPES_CACHE"] = saved


@pytest.fixture(scope="session", autouse=True)
def models_side_by_side(request, recipes_cache):
    """Under `make test`, the worker that does not train builds SmolLM2 first (the vLLM modules
    need it later) while the training worker builds the tiny model that both workers' first
    modules need: otherwise one waits ~40 s for the tiny model with a core idle (each build runs
    on one core). The scheduler gives the training modules to gw0 or gw1, whichever asks first:
    which one got them is read from the first test it sets up (gw1 builds when nothing trains)."""
    worker, items = os.environ.get("PYTEST_XDIST_WORKER"), request.session.items
    first = Path(os.environ.get("PYTEST_CURRENT_TEST", "").split("::", 1)[0]).name
    trains = {item.path.name for item in items} & set(TRAINING_MODULES)
    builder = first not in TRAINING_MODULES if trains else worker == "gw1"
    if worker and builder and any("smollm2_model" in getattr(item, "fixturenames", ()) for item in items):
        request.getfixturevalue("smollm2_model")


@pytest.fixture(scope="session")
def tiny_model(recipes_cache) -> Path:
    """The tiny model as `make demo` builds it (seed 0, the full warm start; ~40 s on 2 cores):
    tests/test_models.py checks it and every training run of the session starts from it."""
    from recipes.tools.models import ensure_model

    return ensure_model("tiny", recipes_cache)


@pytest.fixture(scope="session")
def smollm2_model(recipes_cache) -> Path:
    """SmolLM2-135M-Instruct, converted once from the packaged GGUF (~30 s, 538 MB)."""
    from recipes.tools.models import ensure_model

    return ensure_model("smollm2_135m", recipes_cache)


@pytest.fixture(scope="session")
def e2e(recipes_cache, tiny_model, tmp_path_factory) -> SimpleNamespace:
    """Training runs of the session: `e2e.train(out, method, steps, *overrides)` (`train` above)
    with one model/data cache (`e2e.cache`) for all of them, and `e2e.reference()`, the one uninterrupted
    run that several tests share (REFERENCE above), with a checkpoint with verl's HF weights after
    each step (tests/test_train_e2e.py checks and resumes it, tests/test_eval_e2e.py evaluates its
    checkpoints). `e2e.train_reference(out, steps)` launches it with the same settings;
    `e2e.reference_run_of(out, steps)` is that launch's arguments for `e2e.train`. `e2e.learning()`:
    the shared learning run (LEARNING_STEPS above), its results folder and finished process;
    `e2e.learning_bench(out, *flags)` runs its command again."""
    cache = recipes_cache
    reference: list = []
    learning: list = []

    def reference_run_of(out: Path, steps: int = REFERENCE_STEPS) -> tuple:
        extra = (*REFERENCE, f"trainer.validation_data_dir={out}/val", "trainer.logger=[file,tensorboard]")
        return (out, REFERENCE_METHODS, steps, *extra)

    def train_reference(out: Path, steps: int = REFERENCE_STEPS) -> subprocess.CompletedProcess:
        return train(cache, *reference_run_of(out, steps))

    def reference_run() -> tuple[Path, subprocess.CompletedProcess]:
        if not reference:
            out = tmp_path_factory.mktemp("reference")
            reference.append((out, train_reference(out)))
        return reference[0]

    def learning_bench(out: Path, *flags: str) -> subprocess.CompletedProcess:
        env = {**os.environ, "RECIPES_CACHE": str(cache), "RAY_DEDUP_LOGS": "0"}
        cmd = learning_command(out, *flags)
        return subprocess.run(cmd, cwd=REPO, env=env, capture_output=True, text=True, timeout=1100)

    def learning_run() -> tuple[Path, subprocess.CompletedProcess]:
        if not learning:
            out = tmp_path_factory.mktemp("learning") / "learning"
            before = litter()
            proc = learning_bench(out)
            assert proc.returncode == 0, (proc.stdout[-3000:], proc.stderr[-3000:])
            left = litter() - before - not_ours()
            assert not left, f"the learning run left {sorted(left)}"
            learning.append((out, proc))
        return learning[0]

    return SimpleNamespace(
        cache=cache,
        learning=learning_run,
        learning_bench=learning_bench,
        learning_steps=LEARNING_STEPS,
        learning_held_out=LEARNING_HELD_OUT,
        train=lambda out, method, steps, *extra: train(cache, out, method, steps, *extra),
        reference_run_of=reference_run_of,
        copy_checkpoints=copy_checkpoints,
        reference=reference_run,
        train_reference=train_reference,
        entropy_bonus=ENTROPY_BONUS,
    )


# Fixtures that build a model, or run fresh interpreters that import verl: every test using one is
# `slow` (`make test-fast` skips it; `make test` runs everything).
SLOW_FIXTURES = {"tiny_model", "smollm2_model", "e2e", "tiny", "tiny_dir", "fresh", "quick"}


# The modules whose tests train, all on one worker, one launch at a time (a launch keeps about one
# of the 2 cores busy): those with the `e2e` fixture share the reference run and the learning run;
# the overhead benchmark's launches are its own.
TRAINING_MODULES = (
    "test_eval_e2e.py",
    "test_learning_bench.py",
    "test_train_e2e.py",
    "test_overhead_bench.py",
)
SLURM_MODULE = "test_slurm_cluster.py"
# Modules whose time is mostly waiting (test_rephrase.py: endpoints that refuse or never answer, 21 s
# of timeouts in one test; 6.6 s of CPU in 34 s alone): beside a training launch the launch uses
# the core they leave idle, at the end of the run nothing does.
WAITING_MODULES = ("test_rephrase.py",)


def pytest_collection_modifyitems(items):
    """Marks `slow` what uses a slow fixture; puts the training modules first, then the Slurm
    cluster module (its jobs are long: on the other worker, they run beside the training), then
    the modules that start vLLM (long, and one builds SmolLM2, which another module would
    otherwise wait for at the end), then those that mostly wait (WAITING_MODULES: still beside
    the training), then the rest: first the modules with a slow test, then those without, so
    that the run ends on short modules and the worker that finishes first waits little."""
    for item in items:
        names = set(getattr(item, "fixturenames", ()))
        if SLOW_FIXTURES & names:
            item.add_marker(pytest.mark.slow)
        if "e2e" in names and item.path.name not in TRAINING_MODULES:
            raise pytest.UsageError(f"{item.path.name} trains (the e2e fixture): add it to TRAINING_MODULES")
    vllm = {item.path.name for item in items if item.get_closest_marker("vllm")} - set(TRAINING_MODULES)
    slow = {item.path.name for item in items if item.get_closest_marker("slow")}
    items.sort(
        key=lambda item: (
            item.path.name not in TRAINING_MODULES,
            item.path.name != SLURM_MODULE,
            item.path.name not in vllm,
            item.path.name not in WAITING_MODULES,
            item.path.name not in slow,
        )
    )


def pytest_xdist_make_scheduler(config, log):
    """`make test`'s two pytest-xdist workers: one takes the training modules, all of them (one
    reference run), first; each other module goes to one worker as a whole (its module fixtures
    are built once), and the other worker runs them meanwhile. A launch keeps about one of two
    cores busy, pytest the other."""
    from xdist.scheduler import LoadScopeScheduling

    class TrainingFirst(LoadScopeScheduling):
        def _split_scope(self, nodeid: str) -> str:
            module = nodeid.split("::", 1)[0]
            return "training" if Path(module).name in TRAINING_MODULES else module

    config.option.loadscopereorder = False  # the collection's order: training first
    return TrainingFirst(config, log)
