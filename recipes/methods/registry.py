"""The methods a run combines (`REGISTRY` at the bottom), built from their declarations in
recipes/methods/manifest.py: a declared module's `METHOD`, or a YAML-only baseline.

A method is a module that owns everything it does:
  settings   a frozen dataclass read from `recipes.<name>` (recipes/settings.py), or None
  check      `check(cfg, settings)`: what the rest of the config must be for it to work; raises
             ConfigError in one sentence, before Ray starts
  check_data `check_data(cfg, settings, train_files)`: what it needs from the training data
  hooks      `hooks(cfg, settings) -> TrainerHooks`: what it adds to the trainer's step
             (recipes/extensions/trainer.py calls every active method's hooks and knows no method by name)
  prompts    `prompts(cfg, settings) -> hook`: how it changes each rollout's prompt (the agent
             loop, recipes/extensions/agent_loop.py, calls every active method's hook the same way)
  configure  `configure(cfg, settings, explicit) -> {key: value}`: the verl keys an add-on implies,
             set after composition (recipes/methods/configure.py)
and a configs/method/<name>.yaml: a baseline's sets the verl keys it means, an add-on's only its
`recipes.*` keys. `recipes.train` and the trainer loop over the active methods; adding one is a
module, a YAML and a declaration (docs/adding_a_method.md).

    python -m recipes.methods.registry              every setting: key, default, range, meaning, paper
    python -m recipes.methods.registry --markdown   the same as docs/settings.md

Which methods are active: Hydra records no choice for a list group like `method=[dapo,prorl]`, so
each configs/method/<name>.yaml marks itself with `recipes.methods.<name>: true`, and `active`
reads those marks, in declaration order (baselines first) whatever order the list gave.
"""

from __future__ import annotations

import importlib
from pathlib import Path

from omegaconf import OmegaConf

from recipes import reward_settings
from recipes.methods import manifest
from recipes.methods.base import Method
from recipes.methods.configure import method_settings
from recipes.settings import ConfigError, describe, markdown, yaml_lines


def _no_std(cfg, settings) -> None:
    """Dr. GRPO's advantage is R_i - mean_G R: dividing it by the group's std is GRPO's (its sec. 3.2)."""
    if OmegaConf.select(cfg, "algorithm.norm_adv_by_std_in_grpo"):
        raise ConfigError(
            "algorithm.norm_adv_by_std_in_grpo=true contradicts method dr_grpo, whose advantage is not divided "
            "by the group's std (configs/method/dr_grpo.yaml sets false): drop the override, or use method grpo."
        )


def active_names(cfg) -> list[str]:
    """The methods this config turns on, in declaration order (manifest.py), not list order."""
    return manifest.ordered(OmegaConf.select(cfg, "recipes.methods") or {})


def active(cfg) -> list[Method]:
    """The active methods; an unknown name or a baseline count other than one is a ConfigError."""
    names = active_names(cfg)
    unknown = sorted(set(names) - set(REGISTRY))
    if unknown:
        raise ConfigError(f"method: unknown method(s) {unknown}; known: {sorted(REGISTRY)}.")
    methods = [REGISTRY[n] for n in names]
    baselines = [m.name for m in methods if m.baseline]
    if len(baselines) != 1:
        known = [m.name for m in REGISTRY.values() if m.baseline]
        raise ConfigError(
            f"method: choose exactly one baseline of {known} (got {baselines or 'none'}); they set the "
            "same advantage and loss keys differently. Methods add to one, e.g. method=[dapo,prompt_aug]."
        )
    return methods


def settings(cfg, name: str):
    """The settings of method `name` when it is active (its dataclass, or True if it has none),
    else None."""
    if name not in active_names(cfg):
        return None
    return method_settings(cfg, REGISTRY[name])


def undeclared() -> list[str]:
    """What this process's verl registries hold from a declared method's module but its
    declaration does not list (`registers`): our plugin would not import that module for it in
    verl's workers. Every method module is imported here (REGISTRY)."""
    modules = {d.module: d for d in manifest.DECLARATIONS if d.module}
    out = []
    for key, where in manifest.VERL_REGISTRIES.items():
        for name, entry in getattr(importlib.import_module(where.module), where.attribute).items():
            declaration = modules.get(getattr(entry, "__module__", None))
            if declaration is not None and name not in declaration.registers.get(key, ()):
                out.append(f"{where.what} {name!r} of method {declaration.name}")
    return out


def trainer_hooks(cfg) -> list:
    return [m.hooks(cfg, settings(cfg, m.name)) for m in active(cfg) if m.hooks is not None]


def prompt_hooks(cfg) -> list:
    """The agent loop's prompt hooks of the active methods, in declaration order."""
    return [m.prompts(cfg, settings(cfg, m.name)) for m in active(cfg) if m.prompts is not None]


BASELINE_CHECKS = {"dr_grpo": _no_std}  # the checks of baselines that are their YAML alone


def _method(declaration: manifest.Declaration) -> Method:
    if declaration.module is None:
        return Method(declaration.name, check=BASELINE_CHECKS.get(declaration.name))
    method = importlib.import_module(declaration.module).METHOD
    if method.name != declaration.name:
        raise RuntimeError(
            f"{declaration.module}.METHOD is named {method.name!r}, declared {declaration.name!r}"
        )
    return method


def _registry() -> dict[str, Method]:
    return {d.name: _method(d) for d in manifest.DECLARATIONS}


REGISTRY: dict[str, Method] = _registry()


def sections() -> list[tuple[str, str, type]]:
    """Every settings dataclass: the training reward's, then the registered methods'."""
    methods = [(m.summary, f"recipes.{m.name}", m.settings) for m in REGISTRY.values() if m.settings]
    return [
        (
            "The training reward (recipes/reward_settings.py)",
            reward_settings.SECTION,
            reward_settings.RewardSettings,
        ),
        *methods,
    ]


def _generated(lines: list[str], header: str, cls: type, source: str, after: str | None = None) -> None:
    """Put `header` and `cls`'s settings under it into `lines` (replacing what was there, or right
    after the line `after`), with a note saying where they come from."""
    indent = header[: len(header) - len(header.lstrip())]
    if header in lines:
        at = end = lines.index(header)
        while end + 1 < len(lines) and lines[end + 1].startswith(indent + "  "):
            end += 1
        at -= lines[at - 1].lstrip().startswith("# generated from")
        del lines[at : end + 1]
    else:  # right after the line `after` (a comment may follow it)
        at = [line.split("#")[0].rstrip() for line in lines].index(after) + 1
    note = (
        f"{indent}# generated from the settings dataclass in {source}, which says what each means: "
        "edit it there, then `python -m recipes.methods.registry --write-yaml`"
    )
    lines[at:at] = [note, header, *yaml_lines(cls, indent + "  ")]


def generated_yaml(path: Path) -> str:
    """A config file with its settings blocks generated from the dataclasses, so each default is
    written once (the keys must be in the YAML for Hydra to override them): configs/train.yaml's
    training reward, and each configs/method/<name>.yaml's `recipes.<name>`."""
    lines = path.read_text().splitlines()
    name = path.stem
    if name == "train":
        _generated(lines, "    reward_kwargs:", reward_settings.RewardSettings, "recipes/reward_settings.py")
    elif REGISTRY[name].settings is not None:
        source = f"recipes/methods/{name}.py"
        _generated(lines, f"  {name}:", REGISTRY[name].settings, source, after=f"    {name}: true")
    return "\n".join(lines) + "\n"


CONFIGS = Path(__file__).resolve().parents[2] / "configs"
GENERATED = [CONFIGS / "train.yaml", *sorted((CONFIGS / "method").glob("*.yaml"))]


def main(argv: list[str] | None = None) -> None:
    import argparse

    parser = argparse.ArgumentParser(
        prog="python -m recipes.methods.registry",
        description="Every setting of the training reward and of each method: key, default, allowed "
        "range, meaning and paper.",
        epilog="example: python -m recipes.methods.registry --markdown > docs/settings.md",
    )
    parser.add_argument(
        "--markdown", action="store_true", help="print docs/settings.md instead of plain text"
    )
    parser.add_argument(
        "--write-yaml",
        action="store_true",
        help="rewrite the settings blocks of configs/train.yaml and configs/method/*.yaml from the dataclasses",
    )
    args = parser.parse_args(argv)
    if args.write_yaml:
        for path in GENERATED:
            path.write_text(generated_yaml(path))
        return
    if args.markdown:
        print(markdown(sections()), end="")
        return
    for title, section, cls in sections():
        print(f"{title}\n" + "\n".join(describe(cls, section)))


if __name__ == "__main__":
    main()
