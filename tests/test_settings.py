"""Typed settings (recipes/settings.py) and the method registry (recipes/methods/registry.py)."""

import dataclasses
from pathlib import Path
from typing import Literal

import pytest
import yaml

from recipes.methods import registry
from recipes.settings import ConfigError, describe, load, setting

REPO = Path(__file__).resolve().parents[1]


@dataclasses.dataclass(frozen=True)
class Example:
    count: int = setting(2, ">= 1", "how many")
    rate: float = setting(0.5, "in (0, 1]", "a fraction", paper="Someone 2025, eq. 1")
    mode: Literal["a", "b"] = setting("a", None, "which one")
    limit: float | None = setting(None, "> 0", "off when null")
    names: list = setting(["x"], None, "a list")

    def __post_init__(self):
        if self.mode == "b" and self.limit is None:
            raise ValueError("mode b needs a limit")


def test_load_takes_defaults_and_coerces_ints_to_floats():
    assert load(Example, None, "s") == Example()
    got = load(Example, {"rate": 1, "limit": 3, "mode": "b"}, "s")
    assert got.rate == 1.0 and isinstance(got.rate, float) and got.limit == 3.0 and got.mode == "b"
    assert Example().names == ["x"] and Example().names is not Example().names  # no shared default


@pytest.mark.parametrize(
    ("values", "message"),
    [
        ({"cout": 3}, "s: unknown settings ['cout']; known: ['count', 'rate', 'mode', 'limit', 'names']."),
        ({"count": 0}, "s.count=0 must be >= 1."),
        ({"count": 2.5}, "s.count=2.5 must be an integer."),
        ({"count": True}, "s.count=True must be an integer."),
        ({"rate": 0}, "s.rate=0 must be in (0, 1]."),
        ({"rate": "abc"}, "s.rate='abc' must be a number."),
        ({"mode": "c"}, "s.mode='c' must be one of 'a', 'b'."),
        ({"limit": -1}, "s.limit=-1 must be > 0."),
        ({"limit": "x"}, "s.limit='x' must be a number or null."),
        # NaN passes no range check and inf passes "> 0": neither is a value a setting can take
        ({"limit": float("inf")}, "s.limit=inf must be a finite number."),
        ({"limit": float("nan")}, "s.limit=nan must be a finite number."),
        ({"names": "x"}, "s.names='x' must be list."),
        ({"mode": "b"}, "s: mode b needs a limit"),
    ],
)
def test_bad_values_name_the_key(values, message):
    with pytest.raises(ConfigError) as err:
        load(Example, values, "s")
    assert str(err.value) == message


def test_describe_gives_default_range_help_and_paper():
    lines = describe(Example, "s")
    assert lines[1] == "  s.rate = 0.5 (in (0, 1]): a fraction [Someone 2025, eq. 1]"
    assert lines[2] == "  s.mode = 'a': which one"


# ------------------------------------------------------------------------------ the registry
METHOD_YAMLS = sorted((REPO / "configs" / "method").glob("*.yaml"))


def test_every_method_yaml_marks_itself_and_is_registered():
    names = []
    for path in METHOD_YAMLS:
        marks = yaml.safe_load(path.read_text())["recipes"]["methods"]
        assert marks == {path.stem: True}, path
        names.append(path.stem)
    assert sorted(names) == sorted(registry.REGISTRY)
    assert sorted(m.name for m in registry.REGISTRY.values() if m.baseline) == ["dapo", "dr_grpo", "grpo"]


@pytest.mark.parametrize("path", registry.GENERATED, ids=lambda p: p.stem)
def test_yaml_settings_are_generated_from_the_dataclasses(path):
    """Each default is written once, in its dataclass; the YAML's block is generated from it (Hydra
    needs the keys there to override them)."""
    assert registry.generated_yaml(path) == path.read_text(), (
        "python -m recipes.methods.registry --write-yaml"
    )
    assert path in registry.GENERATED and len(registry.GENERATED) == 1 + len(registry.REGISTRY)


def test_every_setting_has_its_help():
    for _, section, cls in registry.sections():
        for f in dataclasses.fields(cls):
            assert f.metadata["help"], f"{section}.{f.name} has no help"


def test_a_composed_method_gets_the_dataclass_defaults(tmp_path):
    from recipes.train import compose

    cfg = compose(["model=tiny", "data=toy_arithmetic", "method=[grpo,prompt_aug,ta_grpo,prorl,cw_grpo]"])
    for name in ("ta_grpo", "prorl", "cw_grpo"):
        assert registry.settings(cfg, name) == registry.REGISTRY[name].settings(), name
    cfg = compose(["experiment=demo_cpu", "method=[grpo,prompt_aug]", "data.seed=7"])
    expected = dataclasses.replace(registry.REGISTRY["prompt_aug"].settings(), seed=7)  # YAML: ${data.seed}
    assert registry.settings(cfg, "prompt_aug") == expected
    # a default edited in the YAML by hand is what the generator puts back
    text = (REPO / "configs" / "method" / "prorl.yaml").read_text()
    (tmp_path / "prorl.yaml").write_text(text.replace("    reset_every: 200\n", "    reset_every: 100\n"))
    assert registry.generated_yaml(tmp_path / "prorl.yaml") == text


def test_active_methods_come_from_the_method_choice():
    from recipes.train import compose

    cfg = compose(["experiment=demo_cpu", "method=[prorl,cw_grpo,dapo]"])
    assert registry.active_names(cfg) == ["dapo", "cw_grpo", "prorl"]  # declaration order, baseline first
    from recipes.run_folder import run_name  # an unnamed run's folder, the same for every order

    assert run_name(cfg) == "tiny-toy_arithmetic-dapo+cw_grpo+prorl-seed42"
    assert registry.settings(cfg, "prorl").reset_every == 200
    assert registry.settings(cfg, "cw_grpo").name == "cw_grpo"  # active, the paper's options
    assert registry.settings(cfg, "grpo") is None and registry.settings(cfg, "dapo") is True  # no settings
    assert registry.settings(cfg, "ta_grpo") is None  # off
    hooks = registry.trainer_hooks(cfg)
    assert [type(h).__name__ for h in hooks] == ["ProRLHooks"]


def _method_references(tree, names: list[str]) -> list[str]:
    """What a module says about methods `names` in code: an import of a method's module, a name or
    attribute spelled like a method, or a string that is a method's name, config key or module
    (`"prorl"`, `"recipes.prorl.kl_coef"`, `"recipes.methods.cw_grpo"`). Docstrings and comments
    are prose and not looked at, nor strings that merely mention a method inside a sentence."""
    import ast
    import re

    docstrings = {
        id(node.body[0].value)
        for node in ast.walk(tree)
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef))
        and node.body
        and isinstance(node.body[0], ast.Expr)
        and isinstance(node.body[0].value, ast.Constant)
    }
    named = "|".join(names)
    # a method's module, prorl or prorl_triggers; the top-level package prompt_aug (the templates, a
    # room below the methods) is not the method recipes.methods.prompt_aug
    module = re.compile(rf"recipes\.methods\.({named})(_\w+)?(\.[\w.]+)?")
    pattern = re.compile(rf"(recipes\.(methods\.)?)?({named})(\.[\w.]+)?")  # not a preset's name
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.module:
            found += [
                f"import {node.module}.{a.name}"
                for a in node.names
                if module.fullmatch(f"{node.module}.{a.name}")
            ]
            found += [f"import {node.module}"] if module.fullmatch(node.module) else []
        elif isinstance(node, ast.Import):
            found += [f"import {a.name}" for a in node.names if module.fullmatch(a.name)]
        elif (
            isinstance(node, ast.Name)
            and node.id in names
            or isinstance(node, ast.Attribute)
            and node.attr in names
        ):
            found.append(ast.unparse(node))
        elif isinstance(node, ast.Constant) and isinstance(node.value, str) and id(node) not in docstrings:
            if pattern.fullmatch(node.value):
                found.append(repr(node.value))
    return found


def test_no_module_outside_methods_names_a_method():
    """Every module of recipes/ outside recipes/methods/ (the hubs, the checks, the planner, the
    plugin, the tools) loops over the registry and the declarations (recipes/methods/manifest.py):
    none names an add-on method in code (`_method_references`). Baselines are left out: `grpo` is
    also verl's advantage estimator. Not scanned, on purpose: recipes/protocols.py and eval/ (the
    papers' evaluation protocols carry the papers' names, `--protocol cw_grpo`, which are evaluation
    settings, not methods) and scripts/ (a
    benchmark of one method, scripts/bench/cw_grpo_bench.py, must name it; nothing imports
    scripts). recipes/tools/data/ta_authors.py is scanned: it names TA-GRPO's settings only in its
    messages and docstrings, for the user."""
    names = sorted(m.name for m in registry.REGISTRY.values() if not m.baseline)
    assert names == ["cw_grpo", "prompt_aug", "prorl", "ta_grpo"]
    trees = {
        m: t
        for m, t in _trees().items()
        if m.startswith("recipes") and not m.startswith("recipes.methods") and m != "recipes.protocols"
    }
    assert {
        "recipes.plan",
        "recipes.checks",
        "recipes.extensions.plugins",
        "recipes.tools.data.ta_authors",
    } <= set(trees)
    for module, tree in trees.items():
        assert not _method_references(tree, names), (module, _method_references(tree, names))
    # the test sees each kind of reference it forbids
    import ast

    seen = "import recipes.methods.cw_grpo\nfrom recipes.methods import prorl_triggers\nx.ta_grpo\n"
    seen += "'prorl' in m\nf(cfg, 'recipes.prompt_aug.seed')\n'a sentence naming prorl'\n'ta_grpo_math'\n"
    assert len(_method_references(ast.parse(seen), names)) == 5
    library = "import prompt_aug.templates\nfrom prompt_aug.sampling import make_sampler\nfrom prompt_aug import PAPER\n"
    assert _method_references(ast.parse(library), names) == []  # the templates' package is not the method


def test_only_baselines_set_verl_keys_in_their_yaml():
    """The order of `method=[...]` cannot decide a value: an add-on's YAML sets its `recipes.*`
    keys alone (its verl keys come from its `configure`, after composition), and a run has one
    baseline. An add-on that sets verl keys declares them (`derives`)."""
    from recipes.methods import manifest

    for path in METHOD_YAMLS:
        declaration = manifest.DECLARED[path.stem]
        top = set(yaml.safe_load(path.read_text()))
        assert top == {"recipes"} or declaration.baseline, (path.name, top)
        if not declaration.baseline:
            assert registry.REGISTRY[path.stem].configure is not None or not declaration.derives, path
    assert {d.name for d in manifest.DECLARATIONS if d.derives} == {"ta_grpo", "cw_grpo", "prorl"}


def test_every_name_a_method_registers_with_verl_is_declared(monkeypatch):
    """The plugin wires a method's module into verl's workers from its declaration alone: what the
    module registers (in this process, which imported it through the registry) is what it declares,
    name for name, and the plugin imports each such module after the verl module of its registry."""
    from verl.trainer.ppo import core_algos

    from recipes.extensions import plugins
    from recipes.methods import manifest

    for registry_key, name, method in manifest.expected_names():
        table = getattr(core_algos, manifest.VERL_REGISTRIES[registry_key].attribute)
        assert table[name].__module__ == manifest.DECLARED[method].module, name
    assert len(manifest.expected_names()) == 8 and registry.undeclared() == []
    assert manifest.wiring() == [("verl.trainer.ppo.core_algos", "recipes.methods.cw_grpo")]
    for verl_module, ours in manifest.wiring():
        imported = [then() for name, then in plugins.AFTER_IMPORT if name == verl_module]
        assert ours in [getattr(m, "__name__", None) for m in imported], (verl_module, ours)
    # a name a method's module registers without declaring it is found
    stray = lambda *a, **k: None  # noqa: E731
    stray.__module__ = "recipes.methods.prorl"
    monkeypatch.setitem(core_algos.ADV_ESTIMATOR_REGISTRY, "stray_estimator", stray)
    assert registry.undeclared() == ["advantage estimator 'stray_estimator' of method prorl"]


def test_settings_doc_is_current():
    """docs/settings.md is `python -m recipes.methods.registry --markdown`: regenerate it after a change."""
    expected = registry.markdown(registry.sections())
    assert (REPO / "docs" / "settings.md").read_text() == expected


# ------------------------------------------------------------------------------ layering
PACKAGES = ("rewards", "prompt_aug", "recipes", "eval")
GROUND = (
    "recipes",
    "recipes.settings",
    "recipes.files",
    "recipes.checkpoints",
    "recipes.reward_settings",
    "recipes.protocols",
)
# each room, and the rooms (and verl) it may import: imports run downwards only (docs/layout.md)
ALLOWED = {
    "rewards": set(),
    "prompt_aug": set(),
    "ground": {"rewards", "prompt_aug"},  # recipes.reward_settings: the reward's settings
    "platforms": {"ground", "verl"},
    "tools": {"ground", "platforms", "rewards", "prompt_aug", "verl"},
    "methods": {"ground", "platforms", "rewards", "prompt_aug", "verl"},
    "extensions": {"ground", "platforms", "methods", "rewards", "prompt_aug", "verl"},
    "entry": {
        "ground",
        "platforms",
        "tools",
        "methods",
        "extensions",
        "rewards",
        "prompt_aug",
        "verl",
    },
    "eval": {"ground", "platforms", "rewards", "prompt_aug", "verl"},
}


def room(module: str) -> str:
    """The room a module is in: a top-level package, or a folder of recipes/, its ground, or the
    entry point (train, checks, console, run_folder, plan)."""
    parts = module.split(".")
    if parts[0] != "recipes":
        return parts[0]
    if module in GROUND:
        return "ground"
    return parts[1] if parts[1] in ("methods", "extensions", "platforms", "tools") else "entry"


def _trees() -> dict:
    """Module name -> its ast, for every module of PACKAGES."""
    import ast

    modules = {}
    for pkg in PACKAGES:
        for f in sorted((REPO / pkg).rglob("*.py")):
            parts = f.relative_to(REPO).with_suffix("").parts
            modules[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = ast.parse(f.read_text())
    return modules


def _assigned(tree) -> set[str]:
    """Names a module assigns at its top level."""
    import ast

    return {
        t.id
        for node in tree.body
        if isinstance(node, ast.Assign)
        for t in node.targets
        if isinstance(t, ast.Name)
    }


def module_imports() -> dict[str, set[str]]:
    """Module -> the modules of PACKAGES and verl it imports anywhere (lazily too), by ast."""
    import ast

    modules = _trees()

    def resolve(name: str) -> str:
        while name not in modules and "." in name:
            name = name.rpartition(".")[0]
        return name

    graph = {}
    for name, tree in modules.items():
        deps = set()
        for node in ast.walk(tree):
            if isinstance(node, ast.Import):
                deps |= {a.name for a in node.names}
            elif isinstance(node, ast.ImportFrom) and node.module:
                # `from pkg import sub` imports the submodule when there is one
                deps |= {resolve(f"{node.module}.{a.name}") for a in node.names}
        graph[name] = {d for d in deps if d.split(".")[0] in (*PACKAGES, "verl")} - {name}
    return graph


def test_rooms_import_only_the_rooms_below_them():
    graph = module_imports()
    assert {room(m) for m in graph} == set(ALLOWED), sorted({room(m) for m in graph})
    for name, deps in graph.items():
        own = room(name)
        foreign = {"verl" if d.split(".")[0] == "verl" else room(d) for d in deps} - {own}
        assert foreign <= ALLOWED[own], (name, sorted(foreign - ALLOWED[own]))
    assert "verl" in {
        d.split(".")[0] for d in graph["recipes.extensions.reward_manager"]
    }  # the check can see a violation


def test_no_import_cycles():
    graph = module_imports()
    done, path = set(), []

    def visit(node: str) -> None:
        if node in path:
            raise AssertionError(f"import cycle: {' -> '.join(path[path.index(node) :] + [node])}")
        if node in done or node not in graph:
            return
        path.append(node)
        for dep in sorted(graph[node]):
            visit(dep)
        path.pop()
        done.add(node)

    for node in sorted(graph):
        visit(node)


def test_the_old_package_names_import_the_new_modules_for_one_release_with_a_warning():
    """`grader`, `prompt_templates` and `recipes.methods.reward` moved (to `rewards`, `prompt_aug`,
    `rewards.training`); for one release the old names give the same module objects (one grading
    pool, one template table), each with a DeprecationWarning, and the old command still runs."""
    import subprocess
    import sys

    code = """
import warnings
warnings.simplefilter("always")
with warnings.catch_warnings(record=True) as seen:
    import grader, grader.extract, grader.grade, prompt_templates.templates, prompt_templates.sampling
    import recipes.methods.reward
    from grader import compute_score
import rewards.extract, rewards.grade, rewards.training, prompt_aug.templates, prompt_aug.sampling
assert grader.extract is rewards.extract and grader.grade is rewards.grade, "grader"
assert prompt_templates.templates is prompt_aug.templates and prompt_templates.sampling is prompt_aug.sampling
import recipes.reward_settings
assert recipes.methods.reward.training_reward is rewards.training.training_reward
assert recipes.methods.reward.RewardSettings is recipes.reward_settings.RewardSettings
assert compute_score is rewards.grade.compute_score
print(sorted({str(w.message).split()[0] for w in seen if w.category is DeprecationWarning}))
"""
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=REPO)
    assert out.returncode == 0, out.stderr
    assert out.stdout.split("\n")[0] == str(
        sorted(
            [
                "grader",
                "grader.extract",
                "grader.grade",
                "prompt_templates",
                "prompt_templates.templates",
                "prompt_templates.sampling",
                "recipes.methods.reward",
            ]
        )
    )
    old = subprocess.run(
        [sys.executable, "-m", "prompt_templates.templates", "list"], capture_output=True, text=True, cwd=REPO
    )
    new = subprocess.run(
        [sys.executable, "-m", "prompt_aug.templates", "list"], capture_output=True, text=True
    )
    assert (
        old.returncode == new.returncode == 0
        and old.stdout == new.stdout
        and len(new.stdout.splitlines()) == 13
    )
    assert old.stderr.strip().splitlines()[-1] == (
        "note: prompt_templates.templates is now prompt_aug.templates; the old name goes in the next release"
    )


def test_no_module_over_600_lines_and_no_function_over_80():
    """Size limits that keep each file readable in one sitting: a module of the packages or scripts/
    has at most 600 lines, a function at most 80, argument parsers aside (a function whose name says
    it builds a parser or adds arguments: one line per option)."""
    import ast

    files = [f for pkg in (*PACKAGES, "scripts") for f in sorted((REPO / pkg).rglob("*.py"))]
    assert len(files) > 100
    long_modules, long_functions = [], []
    for f in files:
        text = f.read_text()
        rel = f.relative_to(REPO).as_posix()
        if len(text.splitlines()) > 600:
            long_modules.append((rel, len(text.splitlines())))
        for node in ast.walk(ast.parse(text)):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                lines = node.end_lineno - node.lineno + 1
                if lines > 80 and not any(w in node.name for w in ("parser", "arguments")):
                    long_functions.append((rel, node.name, lines))
    assert long_modules == [] and long_functions == []
