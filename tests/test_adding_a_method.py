"""docs/adding_a_method.md, followed word for word in a copy of the project: its add-on registers its
own policy loss and its baseline its own advantage estimator, in a fresh verl process by their
declarations alone, they compose the same in either order, and every method and loss that was
there still registers. And a method that the driver has registered but our plugin does not wire
into verl's processes fails the pre-Ray checks in one line, exit 2."""

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
GUIDE = REPO / "docs" / "adding_a_method.md"

pytestmark = pytest.mark.slow  # fresh interpreters importing verl's trainer modules (~15 s)


def blocks(text: str, lang: str) -> list[str]:
    return re.findall(rf"```{lang}\n(.*?)```", text, re.S)


def section(guide: str, number: int) -> str:
    return guide.split(f"## {number}.")[1].split("\n## ")[0]


def declare(root: Path, declaration: str) -> None:
    """Add a declaration to the end of DECLARATIONS in the copy's recipes/methods/manifest.py."""
    manifest = root / "recipes" / "methods" / "manifest.py"
    end = "\n)\n\nDECLARED: dict[str, Declaration]"
    assert end in manifest.read_text()
    manifest.write_text(manifest.read_text().replace(end, "\n" + declaration.rstrip("\n") + end, 1))


def follow_the_guide(root: Path) -> None:
    """Steps 1-3 and 5 of the guide in the project copy at `root`."""
    guide = GUIDE.read_text()
    methods, configs = root / "recipes" / "methods", root / "configs" / "method"
    (declaration,) = blocks(section(guide, 1), "python")
    declare(root, declaration)
    module, loss = blocks(section(guide, 2), "python")
    (methods / "my_method.py").write_text(module + "\n\n" + loss)
    (yaml,) = blocks(section(guide, 3), "yaml")
    (configs / "my_method.yaml").write_text(yaml)
    assert "DECLARATIONS" in section(guide, 1) and "registry" in section(guide, 4)
    declaration, module = blocks(section(guide, 5), "python")
    declare(root, declaration)
    (methods / "my_method_baseline.py").write_text(module)
    (yaml,) = blocks(section(guide, 5), "yaml")
    (configs / "my_method_baseline.yaml").write_text(yaml)


CHECK = """
from pathlib import Path
from omegaconf import OmegaConf
from recipes.methods.registry import REGISTRY, main, settings
from recipes.checks import check_config
from recipes.verl_seam import VerlSeam
from recipes.train import compose
from recipes.methods import cw_grpo

print("methods:", " ".join(sorted(REGISTRY)))
main(["--write-yaml"])  # step 4: `python -m recipes.methods.registry --write-yaml`
print("yaml:", Path("configs/method/my_method.yaml").read_text().split("  my_method:\\n")[1].split("\\n")[0])
run = ["experiment=demo_cpu", "recipes.my_method.strength=0.2"]
cfg = compose([*run, "method=[my_method_baseline,my_method]"])
other = compose([*run, "method=[my_method,my_method_baseline]"])
print("same:", OmegaConf.to_container(cfg) == OmegaConf.to_container(other))
check_config(cfg)
print("strength:", settings(cfg, "my_method").strength)
print("keys:", cfg.algorithm.adv_estimator, cfg.actor_rollout_ref.actor.policy_loss.loss_mode)
check_config(compose(["experiment=demo_cpu", "method=[grpo,cw_grpo]"]))
VerlSeam().join()  # every declared name, in a fresh verl process
print("seam: ok")
# a verl process that never imported the registry of methods: the plugin's hooks register them
import subprocess, sys
code = (
    "import verl.trainer.ppo.core_algos as c; "
    "print(' '.join(sorted(c.POLICY_LOSS_REGISTRY)), '|', ' '.join(sorted(c.ADV_ESTIMATOR_REGISTRY)))"
)
out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
print("losses:", out.split("|")[0])
print("estimators:", out.split("|")[1])
print("cw_grpo:", " ".join(sorted(cw_grpo.LOSSES)))
"""


def test_the_guides_examples_register_and_every_other_method_still_does(tmp_path):
    root = tmp_path / "project"
    ignore = shutil.ignore_patterns("__pycache__")
    for folder in ("recipes", "rewards", "prompt_aug", "eval", "configs"):
        shutil.copytree(REPO / folder, root / folder, ignore=ignore)
    follow_the_guide(root)
    proc = subprocess.run(
        [sys.executable, "-c", CHECK],
        cwd=root,
        capture_output=True,
        text=True,
        timeout=600,
        env={**os.environ, "PYTHONPATH": str(root)},
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    lines = dict(line.split(": ", 1) for line in proc.stdout.splitlines() if ": " in line)
    assert lines["methods"].split() == sorted(
        [
            "cw_grpo",
            "dapo",
            "dr_grpo",
            "grpo",
            "my_method",
            "my_method_baseline",
            "prompt_aug",
            "prorl",
            "ta_grpo",
        ]
    )
    assert lines["yaml"] == "    strength: 0.1" and lines["strength"] == "0.2"
    assert lines["same"] == "True" and lines["keys"] == "my_method_baseline my_method"
    assert lines["seam"] == "ok"
    losses, estimators = set(lines["losses"].split()), set(lines["estimators"].split())
    assert "my_method" in losses and "vanilla" in losses
    assert "my_method_baseline" in estimators and "grpo" in estimators
    assert set(lines["cw_grpo"].split()) <= losses and len(lines["cw_grpo"].split()) == 8


# A method whose module registers its loss when imported and whose declaration says so, as the
# guide asks, but which exists in this driver process only: the driver has imported it (it passes
# every check made here), while our plugin in a fresh verl process, as in a Ray worker, has no
# declaration of it and so never imports it.
UNWIRED = """
import sys
from verl.trainer.ppo.core_algos import compute_policy_loss_vanilla, register_policy_loss
from recipes.methods import manifest
from recipes.methods.base import Method


@register_policy_loss("unwired_probe")
def unwired_loss(*args, **kwargs):
    return compute_policy_loss_vanilla(*args, **kwargs)


METHOD = Method("unwired_probe")
probe = manifest.Declaration(
    "unwired_probe", "test only", "add-on", module="__main__", registers={"policy_loss": ("unwired_probe",)}
)
manifest.DECLARATIONS = (*manifest.DECLARATIONS, probe)
manifest.DECLARED["unwired_probe"] = probe

from recipes.train import check_only

check_only(["experiment=demo_cpu", "recipes.output_dir=" + sys.argv[1]])
"""


def test_a_method_the_plugin_does_not_wire_fails_the_pre_ray_checks_in_one_line(tmp_path):
    proc = subprocess.run(
        [sys.executable, "-c", UNWIRED, str(tmp_path / "run")],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert proc.returncode == 2, proc.stderr[-3000:]
    errors = [line for line in proc.stderr.splitlines() if "error" in line.lower()]
    assert errors == [
        "config error: a verl process that imports verl.trainer.ppo.core_algos does not get the policy loss "
        "'unwired_probe' of method unwired_probe: our plugin imports a method's module there only for what "
        "recipes/methods/manifest.py declares it registers (`registers`), and the module must register those "
        "names when imported (docs/adding_a_method.md)"
    ], proc.stderr[-3000:]
    assert "preflight: ok" not in proc.stdout and not (tmp_path / "run").exists()
