"""What the docs tell a user to type exists: every `python -m` module, script, path, `make`
target, config group option, Hydra key and command-line flag named in README.md, docs/*.md and the
comments of configs/ and scripts/; every link and its anchor."""

import functools
import importlib.util
import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest
from omegaconf import OmegaConf

REPO = Path(__file__).resolve().parent.parent
DOCS = [REPO / "README.md", *sorted((REPO / "docs").glob("*.md"))]
COMMENTED = [
    *sorted((REPO / "configs").rglob("*.yaml")),
    *sorted((REPO / "scripts").rglob("*.sh")),
    *sorted((REPO / "scripts").rglob("*.sbatch")),
    REPO / "Makefile",
]
GROUPS = ("experiment", "method", "model", "data", "platform")
# a name the reader fills in: <...>, *, ..., an all-caps word (N, NAME, DIR, BASELINE), or the
# example of docs/adding_a_method.md, which the reader creates
PLACEHOLDER = re.compile(r"[<>*{}]|\.\.\.|\b[A-Z][A-Z_]*\b|my_method")


def rel(path: Path) -> str:
    return str(path.relative_to(REPO))


def at_least(found, floor: int, what: str) -> None:
    """Each test checks what its pattern finds; a pattern that an edit broke would find nothing and
    pass. Each floor is about 90% of what the docs held on 2026-11-29 (the count in each call's
    comment): room for edits to the docs, none for a pattern that finds a fraction of them."""
    assert len(found) >= floor, f"only {len(found)} {what} found (at least {floor}): is its pattern broken?"


def commands(text: str) -> list[str]:
    """Shell commands in `text`: the lines of fenced blocks (continuation lines joined, comments
    and prompts dropped) and inline code spans that start with python, sbatch or make."""
    found = []
    for block in re.findall(r"```[a-z]*\n(.*?)```", text, re.S):
        for line in block.replace("\\\n", " ").splitlines():
            line = line.split(" #", 1)[0].strip().removeprefix("$ ")
            if line and not line.startswith("#"):
                found.append(line)
    prose = re.sub(r"```.*?```", "", text, flags=re.S)
    found += [
        c for c in re.findall(r"`([^`\n]+)`", prose) if re.match(r"(\S+=\S+ )*(python|sbatch|make)\b", c)
    ]
    return found


def words(command: str) -> list[str]:
    try:
        return shlex.split(command)
    except ValueError:
        return command.split()


def all_commands() -> list[tuple[str, str]]:
    """(file, command) for every doc."""
    return [(rel(f), c) for f in DOCS for c in commands(f.read_text())]


def comment_text(path: Path) -> str:
    return "\n".join(
        line.split("#", 1)[1] for line in path.read_text().splitlines() if "#" in line and "://" not in line
    )


def test_commands_reads_every_kind_of_command_the_docs_write():
    """The extractor the tests above share, on a sample whose commands are known: fenced blocks
    with and without a language, a continued line, comments and prompts dropped, inline spans
    that run python, sbatch or make (a kind of command the pattern drops may be too few for a floor)."""
    text = (
        "Run `python -m eval.run --help` or `X=1 make test`; `ls` is not one.\n"
        "```bash\n$ python -m recipes.train \\\n  experiment=demo_cpu  # the demo\n# a comment\n\nmake demo\n```\n"
        "```\nsbatch scripts/slurm/train.sbatch\n```\n"
        "```text\nnot run, but read as the others\n```\n"
    )
    assert commands(text) == [
        "python -m recipes.train    experiment=demo_cpu",
        "make demo",
        "sbatch scripts/slurm/train.sbatch",
        "not run, but read as the others",
        "python -m eval.run --help",
        "X=1 make test",
    ]


# ------------------------------------------------------------------------------ modules, scripts
def test_every_python_module_and_script_the_docs_run_exists():
    missing, modules, scripts = [], [], []
    sources = [*((f, c) for f, c in all_commands()), *((rel(p), comment_text(p)) for p in COMMENTED)]
    for where, text in sources:
        for module in re.findall(r"python3? -m ([A-Za-z_][\w.]*)", text):
            modules.append(module)
            if importlib.util.find_spec(module.split(".")[0]) is None or not _module_exists(module):
                missing.append(f"{where}: python -m {module}")
        for script in re.findall(
            r"(?:python3?|bash|sbatch|sh)(?: [-\w=]+)* ((?:scripts|tests|recipes)/[\w/.-]+)", text
        ):
            if not PLACEHOLDER.search(script):
                scripts.append(script)
                if not (REPO / script).exists():
                    missing.append(f"{where}: {script}")
    assert not missing, "\n".join(missing)
    at_least(all_commands(), 435, "shell commands")  # 485
    at_least(set(modules), 16, "distinct `python -m` modules")  # 18
    at_least(scripts, 65, "script paths")  # 73


@functools.cache
def _module_exists(module: str) -> bool:
    """The module exists, and one of this project's runs as a program (`python -m` of a module
    without a main block does nothing)."""
    try:
        spec = importlib.util.find_spec(module)
    except ModuleNotFoundError:
        return False
    if spec is None or spec.origin is None or REPO not in Path(spec.origin).parents:
        return spec is not None
    source = Path(spec.origin)
    if source.name == "__init__.py":
        source = source.parent / "__main__.py"
    return source.is_file() and (
        source.name == "__main__.py" or '__name__ == "__main__"' in source.read_text()
    )


def test_every_path_the_docs_name_exists():
    """Backticked paths into the project's own folders (no placeholders). `eval/` is also a run's
    results folder and the prefix of eval.iterate's metrics, `grader/` the prefix of the trainer's
    grading metrics (and the old name of rewards/, not checked): only their modules count."""
    roots = ("recipes/", "rewards/", "prompt_aug/", "configs/", "scripts/", "tests/", "docs/")
    missing, checked = [], []
    for doc in DOCS:
        prose = doc.read_text()
        for span in re.findall(r"`([^`\n]+)`", prose):
            for token in span.split():
                token = token.rstrip(".,;:)").split("::")[0].split(":")[0]
                ours = token.startswith(roots) or (
                    token.startswith(("eval/", "grader/")) and token.endswith(".py")
                )
                if ours and not PLACEHOLDER.search(token):
                    checked.append(token)
                    if not (REPO / token).exists():
                        missing.append(f"{rel(doc)}: {token}")
    assert not missing, "\n".join(missing)
    at_least(set(checked), 105, "distinct paths")  # 118


def test_every_test_the_docs_cite_exists():
    """`tests/FILE.py::name` in the docs (bad_input.md's table cites the test behind each promise)
    names a test function that exists: a renamed test leaves no dangling citation."""
    import re

    cited = {m for doc in DOCS for m in re.findall(r"(tests/\w+\.py)::(\w+)", doc.read_text())}
    assert len(cited) >= 40
    missing = [
        f"{f}::{name}"
        for f, name in sorted(cited)
        if not re.search(rf"^(async )?def {name}\(", (REPO / f).read_text(), re.M)
    ]
    assert missing == []


def test_every_make_target_the_docs_use_exists():
    targets = set(re.findall(r"^([\w-]+):", (REPO / "Makefile").read_text(), re.M))
    used = [
        (where, target)
        for where, command in all_commands()
        for target in re.findall(r"\bmake ([a-z][\w-]*)", command)
    ]
    missing = [f"{where}: make {target}" for where, target in used if target not in targets]
    assert not missing, "\n".join(missing)
    at_least(targets, 8, "Makefile targets")  # 10
    at_least({target for _, target in used}, 6, "distinct make targets in the docs")  # 8


# ------------------------------------------------------------------------------ links
def slug(heading: str) -> str:
    """GitHub's anchor of a heading."""
    text = re.sub(r"[^\w\- ]", "", heading.strip().lower())
    return text.replace(" ", "-")


def anchors(path: Path) -> set[str]:
    out, seen = set(), {}
    text = re.sub(r"```.*?```", "", path.read_text(), flags=re.S)
    for heading in re.findall(r"^#+\s+(.*)$", text, re.M):
        a = slug(heading)
        out.add(a if a not in seen else f"{a}-{seen[a]}")
        seen[a] = seen.get(a, 0) + 1
    return out


def test_every_link_and_anchor_resolves():
    broken, links = [], []
    for doc in DOCS:
        text = re.sub(r"```.*?```", "", doc.read_text(), flags=re.S)
        for link in re.findall(r"\]\(([^)\s]+)\)", text):
            if link.startswith(("http://", "https://", "mailto:")):
                continue
            links.append(link)
            path, _, anchor = link.partition("#")
            target = (doc.parent / path).resolve() if path else doc
            if not target.exists() or REPO not in target.parents:
                broken.append(f"{rel(doc)}: {link}")
            elif anchor and target.suffix == ".md" and anchor not in anchors(target):
                broken.append(f"{rel(doc)}: {link} (no such heading)")
    assert not broken, "\n".join(broken)
    at_least(links, 240, "links into the project")  # 270
    at_least([link for link in links if "#" in link], 155, "links to a heading")  # 173
    at_least([a for doc in DOCS for a in anchors(doc)], 155, "headings")  # 174


# ------------------------------------------------------------------------------ configs
def train_commands() -> list[tuple[str, list[str]]]:
    """(file, overrides) of every `python -m recipes.train`, `python -m recipes.submit` or
    `sbatch .../train.sbatch` line."""
    out = []
    for where, command in all_commands():
        w = words(command)
        for i, word in enumerate(w):
            if (
                word in ("recipes.train", "recipes.submit")
                and i
                and w[i - 1] == "-m"
                or word.endswith("scripts/slurm/train.sbatch")
            ):
                # (a command inside `$( )` ends with its parenthesis)
                args = [a.removesuffix(")") for a in w[i + 1 :]]
                out.append((where, [a for a in args if "=" in a and not a.startswith("-")]))
                break
    return out


def test_every_config_group_option_the_docs_use_exists():
    missing = []
    texts = [(where, " ".join(args)) for where, args in train_commands()]
    texts += [(rel(p), comment_text(p)) for p in COMMENTED]
    texts += [(rel(d), " ".join(re.findall(r"`([^`\n]+)`", d.read_text()))) for d in DOCS]
    checked = set()
    for where, text in texts:
        for group, value in re.findall(rf"(?<![\w.@/+~])({'|'.join(GROUPS)})=(\[[^\]]*\]|[\w-]+)", text):
            for name in value.strip("[]").split(","):
                name = name.strip()
                if name and not PLACEHOLDER.search(name):
                    checked.add(f"{group}={name}")
                    if not (REPO / "configs" / group / f"{name}.yaml").is_file():
                        missing.append(f"{where}: {group}={name}")
    assert not missing, "\n".join(sorted(set(missing)))
    at_least(checked, 33, "distinct group options")  # 37
    at_least({option.split("=")[0] for option in checked}, len(GROUPS), "config groups")  # all 5


@pytest.mark.slow  # composes each documented command's config (~0.3 s each)
def test_every_key_the_docs_set_on_the_command_line_exists():
    from recipes.train import compose

    missing, keys = [], set()
    commands = train_commands()
    for where, args in commands:
        if any(PLACEHOLDER.search(a) for a in args):
            args = [a for a in args if not PLACEHOLDER.search(a.split("=", 1)[1] if "=" in a else a)]
        groups = [a for a in args if a.split("=", 1)[0] in GROUPS]
        if not any(a.startswith(("experiment=", "model=")) for a in groups):
            groups = ["experiment=demo_cpu", *groups]
        cfg = compose(groups)
        for arg in args:
            key = arg.split("=", 1)[0]
            if key in GROUPS or key.startswith(("+", "~", "hydra.")):
                continue
            keys.add(key)
            if OmegaConf.select(cfg, key, default="<absent>", throw_on_missing=False) == "<absent>":
                missing.append(f"{where}: {key}")
    assert not missing, "\n".join(sorted(set(missing)))
    at_least(commands, 63, "training commands")  # 70
    at_least(keys, 10, "distinct keys set on a training command line")  # 11


# ------------------------------------------------------------------------------ flags
SBATCH_TOOL = {
    "eval_iterative.sbatch": "eval.iterate",
    "eval_checkpoint.sbatch": "eval.run",
    "convert.sbatch": "eval.convert",
}


def flag_uses() -> dict[str, set[tuple[str, str]]]:
    """module or script -> {(file, --flag)} for every documented command that runs it."""
    uses: dict[str, set[tuple[str, str]]] = {}
    for where, command in all_commands():
        w = words(command)
        for i, word in enumerate(w):
            if (
                word == "-m"
                and i + 1 < len(w)
                and w[i + 1] not in ("recipes.train", "recipes.submit")  # Hydra's; submit's are sbatch's
                and w[i + 1].split(".")[0] in ("recipes", "eval", "prompt_aug", "rewards")
            ):
                target, rest = w[i + 1], w[i + 2 :]
            elif word.startswith("scripts/") and word.endswith(".py"):
                target, rest = word, w[i + 1 :]
            elif Path(word).name in SBATCH_TOOL:  # the options go to the tool the job runs
                target, rest = SBATCH_TOOL[Path(word).name], w[i + 1 :]
            else:
                continue
            flags = {(where, a.split("=", 1)[0]) for a in rest if a.startswith("--")}
            uses.setdefault(target, set()).update(flags)
            break
    return uses


@pytest.mark.slow  # each tool's --help in a fresh interpreter
def test_every_flag_the_docs_pass_to_a_tool_exists():
    missing, tools = [], flag_uses()
    for target, used in sorted(tools.items()):
        if not used:
            continue
        cmd = [sys.executable, target] if target.endswith(".py") else [sys.executable, "-m", target]
        known: set[str] = set()
        helps: list[list[str]] = [[]]  # the tool's own --help, then each subcommand's
        while helps:
            proc = subprocess.run(
                [*cmd, *helps.pop(), "--help"], cwd=REPO, capture_output=True, text=True, timeout=120
            )
            assert proc.returncode == 0, (target, proc.stderr[-2000:])
            known |= set(re.findall(r"--[\w-]+", proc.stdout))
            assert "--help" in known, (target, proc.stdout[:500])  # the pattern reads its --help
            subcommands = re.search(r"^usage: \S+ \[-h\] \{([\w,-]+)\}", proc.stdout)
            helps += [[sub] for sub in subcommands[1].split(",")] if subcommands else []
        missing += [f"{where}: {target} {flag}" for where, flag in used if flag not in known]
    assert not missing, "\n".join(sorted(missing))
    at_least([t for t, used in tools.items() if used], 12, "tools given flags")  # 15
    at_least({(t, flag) for t, used in tools.items() for _, flag in used}, 51, "distinct tool flags")  # 57


# ------------------------------------------------------------------------------ lists
def test_every_preset_has_a_row_in_the_presets_table_and_every_row_a_preset():
    """docs/running.md's presets table is the one list of presets (`--help` reads configs/)."""
    text = (REPO / "docs" / "running.md").read_text().split("## Presets", 1)[1].split("\n## ", 1)[0]
    rows = re.findall(r"^\| `([\w-]+)` \|", text, re.M)
    presets = sorted(p.stem for p in (REPO / "configs" / "experiment").glob("*.yaml"))
    assert sorted(rows) == presets


def test_the_time_limits_the_docs_give_the_presets_are_their_submissions(capsys):
    """docs/running.md's table of time limits: each row's presets are submitted (`python -m
    recipes.submit --dry-run`) with its time limit and its nodes x GPUs."""
    from recipes import submit

    text = (REPO / "docs" / "running.md").read_text().split("## Long runs and Slurm time limits", 1)[1]
    rows = re.findall(r"^\| (`\w+`.*?) \| ([\d:-]+) \| (\d+) x (\d+) \|", text.split("\n## ", 1)[0], re.M)
    named = [(p, row) for row in rows for p in re.findall(r"`(\w+)`", row[0].split(" (")[0])]
    assert len(named) >= 13, rows
    wrong = []
    for preset, (_, time, nodes, gpus) in named:
        assert submit.main(["--dry-run", f"experiment={preset}"]) == 0, preset
        said = capsys.readouterr().out.split()
        want = [f"--time={time}", f"--nodes={nodes}", f"--gpus-per-node={gpus}"]
        if [w for w in want if w not in said]:
            wrong.append(f"{preset}: the docs say {want}, it submits {said}")
    assert not wrong, "\n".join(wrong)


# ------------------------------------------------------------------------------ figures and files
def test_the_docs_name_the_metrics_file_where_recipes_train_writes_it(tmp_path, monkeypatch):
    """A launch's metrics go to metrics/<launch time>.jsonl in its folder (one file per launch, so
    a resumed run keeps each launch's); configs/train.yaml once said metrics.jsonl."""
    from recipes import train

    monkeypatch.setattr(train, "_HELD", None, raising=False)  # the lock the launch keeps on its log
    cfg = train.compose(["experiment=demo_cpu", f"recipes.output_dir={tmp_path}"])
    metrics, _ = train._prepare_run_folder(cfg, [])
    assert metrics.parent == tmp_path / "metrics" and metrics.suffix == ".jsonl"
    texts = [(rel(d), d.read_text()) for d in DOCS] + [(rel(p), comment_text(p)) for p in COMMENTED]
    wrong = [f"{where}: {m}" for where, text in texts for m in re.findall(r"\S*\bmetrics\.jsonl", text)]
    assert not wrong, "\n".join(wrong)


def test_the_plan_figures_the_docs_quote_are_the_plans():
    """README's first GPU run (its peak, disk and time, which once said 0.6 h where the plan printed
    ~1 h) and docs/slurm.md's table of every GPU preset, as `python -m recipes.plan` prints them."""
    from recipes import plan
    from recipes.train import compose

    e = plan.estimate(compose(["experiment=first_gpu_run"]))
    hours = plan.hours(e.steps * e.step_s)
    assert f"{e.steps:,} steps ~{hours} h " in plan.report(e)
    quoted = {
        "README.md": [
            f"gives a peak of {e.peak_gib:.1f} GiB per GPU and {e.run_disk_gib:.0f} GiB of disk",
            f"About {hours} h of training steps (~{e.step_s:.0f} s a step) by `recipes.plan`'s time model",
        ],
        "configs/experiment/first_gpu_run.yaml": [f"Training steps: ~{hours} h by recipes.plan's time model"],
        "docs/running.md": [f"(~{hours} h of steps by the uncalibrated time model)"],
    }
    wrong = [
        f"{where}: {text!r}"
        for where, texts in quoted.items()
        for text in texts
        if text not in " ".join(re.sub(r"^\s*# ?", "", (REPO / where).read_text(), flags=re.M).split())
    ]
    section = (REPO / "docs" / "slurm.md").read_text().split("## Memory, disk and time per preset", 1)[1]
    rows = re.findall(r"^\| `(\w+)`[^|]*\| (.*) \|$", section.split("\n## ", 1)[0], re.M)
    assert len(rows) >= 8, rows
    for name, cells in rows:  # a row's first preset; the others share its figures
        cfg = compose([f"experiment={name}"])
        e = plan.estimate(cfg)
        figures = [
            f"{cfg.trainer.nnodes} x {cfg.trainer.n_gpus_per_node}",
            f"{e.rows[-1][1]:.1f} / {e.rows[-1][2]:.1f}",
            f"{e.checkpoint_gib:.1f} / {e.hf_gib:.1f}",
            f"{e.run_disk_gib:.0f}",
            f"{e.steps:,}",
            f"{e.step_s:.0f}",
            f"{plan.hours(e.steps * e.step_s)} h",
        ]
        got = [c.strip().split(" (")[0] for c in cells.split("|")]
        if got != figures:
            wrong.append(f"docs/slurm.md {name}: {got} where the plan gives {figures}")
    assert not wrong, "\n".join(wrong)


# every setting issue 56 asked each preset's fidelity table to cover (a word of each, in the
# setting column): data, batch, schedule, KL, loss aggregation, prompt, format reward, chat
# template, evaluation
FIDELITY_SETTINGS = {
    "data": r"data|questions",
    "batch": r"batch",
    "schedule": r"learning rate|schedul|\blr\b|warm-up",
    "KL": r"\bKL\b",
    "loss aggregation": r"aggregat|averag",
    "prompt": r"prompt",
    "format reward": r"format",
    "chat template": r"chat.template|thinking",
    "evaluation": r"evaluat",
}
FIDELITY_HEADER = "| setting | authors (source) | ours | same, or the reason |"


def fidelity_tables() -> dict[str, list[list[str]]]:
    """docs/methods.md's section title -> the rows of its `### Fidelity to the authors' run` table."""
    text = (REPO / "docs" / "methods.md").read_text()
    tables = {}
    for section in re.split(r"\n(?=## )", text):
        title = section.splitlines()[0].removeprefix("## ")
        parts = section.split("\n### Fidelity to the authors' run\n")
        assert len(parts) <= 2, f"{title}: more than one fidelity table"
        if len(parts) == 2:
            lines = [line for line in parts[1].splitlines() if line.startswith("|")]
            body = parts[1][parts[1].index("|") :].split("\n\n")[0].splitlines()
            assert body[0] == FIDELITY_HEADER, (title, body[0])
            assert lines[: len(body)] == body
            tables[title] = [[c.strip() for c in row.strip("|").split(" | ")] for row in body[2:]]
    return tables


def test_each_paper_method_has_one_fidelity_table_covering_every_setting_with_same_or_a_reason():
    tables = fidelity_tables()
    assert set(tables) == {"Prompt augmentation", "TA-GRPO", "CW-GRPO", "ProRL"}, sorted(tables)
    for title, rows in tables.items():
        for row in rows:
            assert len(row) == 4 and all(row), (title, row)
            # `same`, or a reason: a sentence, not a bare "differs" / "no"
            assert row[3] == "same" or len(row[3].split()) >= 4, (title, row)
        settings = " ".join(row[0] for row in rows)
        missing = [s for s, pattern in FIDELITY_SETTINGS.items() if not re.search(pattern, settings, re.I)]
        assert not missing, (title, missing)
