"""Platforms are registered (recipes/platforms/registry.py), as methods are: every part of the
project that acts by platform looks its `Platform` up; none compares the platform's name."""

import ast
import contextlib
from pathlib import Path

import pytest

from recipes.platforms import cpu, gpu
from recipes.platforms import registry as platforms
from recipes.settings import ConfigError

REPO = Path(__file__).resolve().parent.parent
PACKAGES = ("rewards", "prompt_aug", "recipes", "eval")
# the keys that name the platform; read only in recipes/platforms/ (the registry and its platforms)
KEYS = (platforms.KEY, "VERL_PLATFORM")


def _mentions_platform(node: ast.AST) -> bool:
    """`node` reads a platform's name: a name or attribute called *platform*, or a call or subscript
    with a string argument that says platform (select(cfg, "recipes.platform"), environ["VERL_PLATFORM"])."""
    for sub in ast.walk(node):
        if isinstance(sub, ast.Name) and "platform" in sub.id.lower():
            return True
        if isinstance(sub, ast.Attribute) and "platform" in sub.attr.lower():
            return True
        if isinstance(sub, ast.Constant) and isinstance(sub.value, str) and "platform" in sub.value.lower():
            return True
    return False


def _names(node: ast.AST) -> set[str]:
    """The string constants of `node` (and of a tuple, list or set it is)."""
    elts = node.elts if isinstance(node, (ast.Tuple, ast.List, ast.Set)) else [node]
    return {e.value for e in elts if isinstance(e, ast.Constant) and isinstance(e.value, str)}


def platform_branches(source: str) -> list[str]:
    """Comparisons of a platform's name with a registered name, and reads of the keys that name
    the platform, in `source`: each as `line: code`."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Compare):
            operands = [node.left, *node.comparators]
            literal = [o for o in operands if _names(o) & set(platforms.PLATFORMS)]
            if literal and any(_mentions_platform(o) for o in operands if o not in literal):
                found.append(f"{node.lineno}: {ast.unparse(node)}")
        elif isinstance(node, ast.Constant) and node.value in KEYS:
            found.append(f"{node.lineno}: {node.value!r}")
    return found


def test_the_scan_sees_a_platform_branch():
    """The forms the project used before the registry, and a Slurm gres test that is no platform."""
    branches = """
if select(cfg, "recipes.platform") == "cpu": pass
if OmegaConf.select(cfg, "recipes.platform") != "gpu": pass
if os.environ.get("VERL_PLATFORM") == "cpu": pass
if platform == "cpu" and rollout == "vllm": pass
if choices["platform"] in ("cpu", "gpu"): pass
"""
    lines = sorted(int(hit.split(":")[0]) for hit in platform_branches(branches))
    assert lines == [2, 2, 3, 3, 4, 4, 5, 6]  # each comparison, and each read of the key
    assert platform_branches('if name == "--gres" and "gpu" not in arg: pass') == []
    assert platform_branches("if platforms.of(cfg).host_memory: pass") == []


def test_no_module_outside_platforms_branches_on_the_platform_name():
    found = []
    for pkg in PACKAGES:
        for path in sorted((REPO / pkg).rglob("*.py")):
            rel = path.relative_to(REPO).as_posix()
            if rel.startswith("recipes/platforms/"):
                continue
            found += [f"{rel}:{hit}" for hit in platform_branches(path.read_text())]
    assert not found, "look the platform up (recipes/platforms/registry.py) instead:\n" + "\n".join(found)


def test_the_platform_of_a_config_and_of_a_process():
    from recipes.train import compose

    cpu_run = platforms.of(compose(["experiment=demo_cpu"]))
    gpu_run = platforms.of(compose(["experiment=demo_cpu", "platform=gpu"]))
    assert (cpu_run.name, gpu_run.name) == ("cpu", "gpu")
    assert cpu_run.environment == cpu.CPU_ENV and cpu_run.environment["VERL_PLATFORM"] == "cpu"
    assert gpu_run.environment == {} and gpu_run.patches == {}
    assert cpu_run.patches == cpu.PATCHES and gpu_run.preflight is gpu.preflight
    assert (cpu_run.host_memory, gpu_run.host_memory) == (True, False)
    assert (cpu_run.seeded_chunked_prefill, gpu_run.seeded_chunked_prefill) == (False, True)
    # a verl process: VERL_PLATFORM (exported by recipes.train) selects ours; anything else is verl's own
    assert platforms.in_process({"VERL_PLATFORM": "cpu"}) is cpu_run
    assert platforms.in_process({}) is gpu_run
    assert platforms.in_process({"VERL_PLATFORM": "npu"}) is gpu_run


def test_an_unknown_platform_is_one_config_error():
    """(recipes.checks.validate looks the platform up before Ray starts, so this is its error.)"""
    from recipes.train import compose

    with pytest.raises(ConfigError, match=r"^recipes.platform=tpu: not a platform; choose one of cpu, gpu "):
        platforms.of(compose(["experiment=demo_cpu", "recipes.platform=tpu"]))


def test_the_gpu_session_only_says_how_the_training_computes():
    """(The CPU platform's session line is checked by the end-to-end launch, tests/test_train_e2e.py.)"""
    from recipes.train import compose

    said = []
    gpu_run = platforms.named("gpu")
    cfg = compose(["experiment=demo_cpu", "platform=gpu"])
    assert isinstance(gpu_run.session(cfg, said.append, ""), contextlib.nullcontext) and said == []
    gpu_run.session(cfg, said.append, "old log-probs from the update's own forward (on-policy)")
    assert said == ["training: old log-probs from the update's own forward (on-policy)"]
