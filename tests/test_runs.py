"""Following runs without a launch: `python -m recipes.runs`'s bad input, `compare`'s --out, and the
crash message of recipes.train before a run folder exists (recipes/console.py). What it lists and
plots of real runs: tests/test_train_e2e.py (the reference run, and folders derived from it)."""

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from recipes import console, runs

REPO = Path(__file__).resolve().parent.parent


def test_runs_with_a_bad_dir_says_so_in_one_line_and_exits_2(tmp_path, monkeypatch, capsys):
    """A folder that does not exist or is a file: one line, exit 2, no traceback (the command line
    itself once); a folder with no run in it is not an error."""
    proc = subprocess.run(
        [sys.executable, "-m", "recipes.runs", str(tmp_path / "nope")],
        cwd=REPO,
        capture_output=True,
        text=True,
    )
    assert (proc.returncode, proc.stdout, proc.stderr) == (
        2,
        "",
        f"recipes.runs: {tmp_path / 'nope'}: no such folder\n",
    )
    (tmp_path / "file").write_text("x")
    assert runs.main([str(tmp_path / "file")]) == 2
    (tmp_path / "empty" / "logs").mkdir(parents=True)  # logs/ without config.yaml: not a run
    assert runs.main([str(tmp_path / "empty")]) == 0
    # a new user's first look, before any run: no outputs/ here yet, which is not an error
    monkeypatch.chdir(tmp_path / "empty")
    assert runs.main([]) == 0 and "no runs under outputs" in capsys.readouterr().out


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--out", "{t}/c.jpg"], "--out {t}/c.jpg: the comparison is a PNG; name a file ending in .png"),
        (
            ["--out", "{t}/theirs.png"],
            "--out {t}/theirs.png was not written by python -m recipes.runs compare;",
        ),
        (["--out", "{t}/folder.png", "--force"], "--out {t}/folder.png is a folder, not a file"),
        (
            ["--out", "{t}/c.png", "--labels", "a,a"],
            "--labels: 2 distinct names needed, one per run; got 'a,a'",
        ),
        (
            ["--out", "{t}/c.png"],
            "{t}/notarun is not a run folder of recipes.train (no metrics/ folder in it)",
        ),
    ],
)
def test_runs_compare_refuses_bad_input_in_one_line_exit_2_writing_nothing(tmp_path, capsys, args, message):
    """A PNG someone else wrote (a PNG without this tool's mark) is not replaced without --force; a
    folder is never; labels that do not name each run once; a run folder without metrics."""
    (tmp_path / "notarun").mkdir()
    (tmp_path / "folder.png").mkdir()
    theirs = tmp_path / "theirs.png"
    theirs.write_bytes(b"\x89PNG\r\n\x1a\n" + b"\0" * 20)
    before = sorted(os.listdir(tmp_path))
    argv = [
        "compare",
        str(tmp_path / "notarun"),
        str(tmp_path / "notarun2"),
        *(a.format(t=tmp_path) for a in args),
    ]
    if "--labels" not in args and "c.png" in args[1]:
        argv.remove(str(tmp_path / "notarun2"))
    assert runs.main(argv) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"recipes.runs: {message.format(t=tmp_path)}") and err.count("\n") == 1, err
    assert ("--force" in err) == ("theirs" in err)  # what makes it go, where something can
    assert sorted(os.listdir(tmp_path)) == before and theirs.read_bytes() == b"\x89PNG\r\n\x1a\n" + b"\0" * 20


def test_a_crash_before_the_run_folder_names_a_scratch_log_that_still_exists(capfd):
    """Before the run folder exists (the checks before Ray), output goes to a scratch log; a crash
    there (an exception no check expected) shows the log's last lines and names it: the file must
    still be there to read, with the crash's `failed:` line. Without a crash it is removed."""
    with pytest.raises(RuntimeError), console.held():
        os.write(1, b"preparing the model\n")  # as a child process writes (pytest holds sys.stdout)
        raise RuntimeError("boom")
    err = capfd.readouterr().err
    named = Path(re.search(r"--- last \d+ lines of (\S+):", err).group(1))
    try:
        assert named.read_text() == "preparing the model\nfailed: RuntimeError: boom\n"
    finally:
        named.unlink(missing_ok=True)
    with console.held() as text:
        os.write(1, b"fine\n")
    assert text == ["fine\n"]
