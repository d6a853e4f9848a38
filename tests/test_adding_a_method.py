"""docs/adding_a_method.md, followed word for word in a copy of the project: its example method
registers, with its own policy loss, and every method and loss that was there still does."""

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
GUIDE = REPO / "docs" / "adding_a_method.md"

pytestmark = pytest.mark.slow  # a fresh interpreter importing verl's trainer modules (~15 s)


def blocks(text: str, lang: str) -> list[str]:
    return re.findall(rf"```{lang}\n(.*?)```", text, re.S)


def follow_the_guide(root: Path) -> None:
    """Steps 1-3 of the guide in the project copy at `root`."""
    guide = GUIDE.read_text()
    module, loss, plugin_line = blocks(guide.split("## 2.")[0], "python")
    # 1. the module, with its policy loss at the end, and the line in AFTER_IMPORT
    (root / "recipes" / "methods" / "my_method.py").write_text(module + "\n\n" + loss)
    plugins = root / "recipes" / "extensions" / "plugins.py"
    head = "AFTER_IMPORT: list[tuple[str, Callable[[], object]]] = [\n"
    assert head in plugins.read_text()
    plugins.write_text(plugins.read_text().replace(head, head + plugin_line))
    # 2. the YAML
    (yaml,) = blocks(guide.split("## 2.")[1].split("## 3.")[0], "yaml")
    (root / "configs" / "method" / "my_method.yaml").write_text(yaml)
    # 3. the registry: the import, and METHOD in the list
    registry = root / "recipes" / "methods" / "registry.py"
    text = registry.read_text()
    assert "from recipes.methods import cw_grpo, my_method, ..." in guide
    text = text.replace(
        "from recipes.methods import cw_grpo, ", "from recipes.methods import cw_grpo, my_method, ", 1
    )
    text = text.replace("        prorl.METHOD,\n", "        prorl.METHOD,\n        my_method.METHOD,\n", 1)
    registry.write_text(text)


CHECK = """
from pathlib import Path
from recipes.methods.registry import REGISTRY, main, settings
from recipes.checks import check_config
from recipes.train import compose
from recipes.methods import cw_grpo

print("methods:", " ".join(sorted(REGISTRY)))
main(["--write-yaml"])  # step 3: `python -m recipes.methods.registry --write-yaml`
print("yaml:", Path("configs/method/my_method.yaml").read_text().split("  my_method:\\n")[1].split("\\n")[0])
cfg = compose(["experiment=demo_cpu", "method=[grpo,my_method]", "recipes.my_method.strength=0.2"])
check_config(cfg)
print("strength:", settings(cfg, "my_method").strength)
check_config(compose(["experiment=demo_cpu", "method=[grpo,cw_grpo]"]))
# a verl process that never imported the registry of methods: the plugin's hooks register the losses
import subprocess, sys
code = "import verl.trainer.ppo.core_algos as c; print(' '.join(sorted(c.POLICY_LOSS_REGISTRY)))"
print("losses:", subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout)
print("cw_grpo:", " ".join(sorted(cw_grpo.LOSSES)))
"""


def test_the_guides_example_registers_and_every_other_method_still_does(tmp_path):
    root = tmp_path / "project"
    ignore = shutil.ignore_patterns("__pycache__")
    for folder in ("recipes", "grader", "prompt_templates", "eval", "configs"):
        shutil.copytree(REPO / folder, root / folder, ignore=ignore)
    follow_the_guide(root)
    proc = subprocess.run(
        [sys.executable, "-c", CHECK],
        cwd=root,
        capture_output=True,
        text=True,
        timeout=300,
        env={**os.environ, "PYTHONPATH": str(root)},
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    lines = dict(line.split(": ", 1) for line in proc.stdout.splitlines() if ": " in line)
    assert lines["methods"].split() == sorted(
        ["cw_grpo", "dapo", "dr_grpo", "grpo", "my_method", "prompt_aug", "prorl", "ta_grpo"]
    )
    assert lines["yaml"] == "    strength: 0.1" and lines["strength"] == "0.2"
    losses = set(lines["losses"].split())
    assert "my_method" in losses and "vanilla" in losses
    assert set(lines["cw_grpo"].split()) <= losses and len(lines["cw_grpo"].split()) == 8
