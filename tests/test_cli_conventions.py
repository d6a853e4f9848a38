"""Every program of the project keeps the command-line convention: `--help` exits 0 without a
traceback, and a bad argument is one line and exit 2 (0 ok, 1 the work failed at run time, 2 bad
input, 3 only where a tool's --help documents it). The programs are found in the tree, so a new
one is covered without being listed: each `python -m` package or module of recipes/, eval/,
rewards/ and prompt_aug/ with a main, each scripts/ file with one, and pyproject's console
scripts."""

import os
import re
import subprocess
import sys
import time
import zipfile
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
PACKAGES = ("recipes", "eval", "rewards", "prompt_aug")
MAIN = re.compile(r'^if __name__ == "__main__":', re.M)


def programs() -> dict[str, list[str]]:
    """How a user starts each program -> the interpreter's arguments that start it."""
    found = {}
    for root in (*PACKAGES, "scripts"):
        for source in sorted((REPO / root).rglob("*.py")):
            if "__pycache__" in source.parts:
                continue
            path = source.relative_to(REPO)
            if root == "scripts":
                if MAIN.search(source.read_text()):
                    found[f"python {path}"] = [str(source)]
            elif source.name == "__main__.py":
                module = ".".join(path.parent.parts)
                found[f"python -m {module}"] = ["-m", module]
            elif MAIN.search(source.read_text()):
                module = ".".join(path.with_suffix("").parts)
                found[f"python -m {module}"] = ["-m", module]
    # [project.scripts]: name = "module:function" (none today; a new one is covered here)
    table = re.search(
        r"^\[project\.scripts\]\n(.*?)(?=^\[|\Z)", (REPO / "pyproject.toml").read_text(), re.M | re.S
    )
    for name, module, function in re.findall(
        r'^([\w-]+)\s*=\s*"([\w.]+):(\w+)"', table[1] if table else "", re.M
    ):
        code = f"import sys, {module} as m; sys.argv[0] = {name!r}; sys.exit(m.{function}())"
        found[name] = ["-c", code]
    return found


@pytest.fixture(scope="module")
def answers(tmp_path_factory) -> dict[tuple[str, str], tuple[subprocess.CompletedProcess, list[str]]]:
    """(program, argument) -> (its answer, what it left in its working folder), for `--help` and
    an unknown option: every program twice, in fresh interpreters, four at a time (~25 CPU-seconds,
    half of it recipes.methods.registry importing verl). Each runs in an empty folder of its own,
    the project on its PYTHONPATH."""
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")])),
    }
    found = programs()
    jobs = [(name, arg) for name in found for arg in ("--help", "--no-such-option")]

    def run(job):
        name, arg = job
        cwd = tmp_path_factory.mktemp("cwd")
        proc = subprocess.run(
            [sys.executable, *found[name], arg],
            cwd=cwd,
            env=env,
            capture_output=True,
            text=True,
            timeout=300,
        )
        return job, (proc, sorted(p.name for p in cwd.iterdir()))

    started = time.monotonic()
    with ThreadPoolExecutor(max_workers=4) as pool:
        out = dict(pool.map(run, jobs))
    print(f"{len(jobs)} runs of {len(found)} programs in {time.monotonic() - started:.1f} s")
    return out


@pytest.mark.slow  # every program's --help and a bad option in fresh interpreters (~25 CPU-seconds)
def test_every_program_answers_help_with_exit_0_and_no_traceback(answers):
    found = {name for name, _ in answers}  # the discovery: each way a program is started
    for name in (
        "python -m recipes.train",
        "python -m recipes.plan",
        "python -m recipes.tools.data",  # a package's __main__.py
        "python -m eval.run",
        "python scripts/bench/demo_profile.py",
        "python scripts/gpu_bundle/bare_check.py",  # scripts/ at any depth
    ):
        assert name in found, name
    assert not any("tests" in name or "__init__" in name for name in found)
    wrong = []
    for (name, arg), (proc, left) in sorted(answers.items()):
        if arg != "--help":
            continue
        if proc.returncode != 0 or "Traceback" in proc.stderr or not proc.stdout.strip() or left:
            wrong.append(
                f"{name} --help: exit {proc.returncode}, left {left}, {proc.stderr.strip()[-300:]!r}"
            )
    assert not wrong, "\n".join(wrong)


def message(stderr: str) -> list[str]:
    """stderr less argparse's usage block (`usage: ...` and its indented continuation lines)."""
    lines = stderr.strip().splitlines()
    if lines and lines[0].startswith("usage:"):
        lines = lines[1:]
        while lines and lines[0][:1].isspace():
            lines = lines[1:]
    return lines


@pytest.mark.slow  # shares the runs of the --help test
def test_every_program_refuses_an_unknown_option_in_one_line_with_exit_2(answers):
    """Exit 2, one line after the usage (naming the option, or what is missing before it could be
    read), nothing on stdout, nothing written, no traceback."""
    wrong = []
    for (name, arg), (proc, left) in sorted(answers.items()):
        if arg == "--help":
            continue
        said = message(proc.stderr)
        if (
            proc.returncode != 2
            or "Traceback" in proc.stderr
            or proc.stdout.strip()
            or left
            or len(said) != 1
            or not ("--no-such-option" in said[0] or "required" in said[0])
        ):
            wrong.append(f"{name} {arg}: exit {proc.returncode}, left {left}, said {said[-3:]!r}")
    assert not wrong, "\n".join(wrong)


def test_the_scripts_bad_inputs_are_one_line_and_exit_2(tmp_path, capsys):
    """Beyond an unknown option, in this process: a --wheel that is missing, not a zip or a zip
    without a wheel's METADATA (were tracebacks); demo_profile's bad override, refused before it
    builds a model or data (was Hydra's traceback); cw_grpo_bench's --device gpu (torch's)."""
    from script_module import load_script

    requirements = load_script(REPO / "scripts" / "vllm_cpu_requirements.py")
    (tmp_path / "text.whl").write_text("not a zip")
    with zipfile.ZipFile(tmp_path / "empty.whl", "w") as z:
        z.writestr("vllm/__init__.py", "")
    for wheel in ("missing.whl", "text.whl", "empty.whl"):
        assert requirements.main(["--wheel", str(tmp_path / wheel)]) == 2, wheel
        err = capsys.readouterr()
        assert (
            err.out == "" and err.err.count("\n") == 1 and err.err.startswith(f"--wheel {tmp_path / wheel}: ")
        )

    demo = load_script(REPO / "scripts" / "bench" / "demo_profile.py")
    bench = load_script(REPO / "scripts" / "bench" / "cw_grpo_bench.py")
    calls = [
        (lambda: demo.main(["experiment=no_such_preset"]), "config error: ", "experiment/no_such_preset"),
        (lambda: demo.main(demo.parse(["--steps", "3"])), "usage: ", "--steps"),
        (lambda: bench.main(["--device", "gpu"]), "usage: ", "--device"),
    ]
    for call, start, named in calls:
        with pytest.raises(SystemExit) as exit_:
            call()
        err = capsys.readouterr()
        assert exit_.value.code == 2 and err.out == "", named
        assert err.err.startswith(start) and len(message(err.err)) == 1 and named in err.err, err.err
