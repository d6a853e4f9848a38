"""Nothing the tools under recipes/tools write destroys what was there (issue 55): every command
that writes (`models`, `data toy_arithmetic`, `data prepare`, `rephrase`) refuses a path holding
what it did not make, in one line and exit 2, and leaves everything there byte for byte; `--force`
replaces it, and what the tool made itself it may write again. Bad input exits 2; every `--help`
exits 0.

All in-process, through each tool's own `main` (what `python -m` runs). No network: `prepare` is
refused before it would download, and the one rephrase run let through finds every question in
the cache of an earlier run, so it sends nothing."""

import hashlib
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from recipes.tools import data, models
from recipes.tools import rephrase as rp
from recipes.tools.data import make_rows, read_meta, validate_parquet, write_rows

QUICK = 0  # warm-start steps of the one model build: none (the real build: WARM_START["steps"])
DEAD = "http://127.0.0.1:9/v1"  # nothing listens there


def _tree(root: Path) -> dict[str, str]:
    """Every path under `root`: a file's sha256, a folder's "dir", a link's target."""
    tree = {}
    for p in sorted(root.rglob("*")):
        rel = str(p.relative_to(root))
        if p.is_symlink():
            tree[rel] = f"-> {p.readlink()}"
        elif p.is_dir():
            tree[rel] = "dir"
        else:
            tree[rel] = hashlib.sha256(p.read_bytes()).hexdigest()
    return tree


def _theirs(root: Path) -> tuple[Path, Path]:
    """Someone's folder (files and a subfolder) and someone's file, under `root`."""
    folder = root / "theirs"
    (folder / "sub").mkdir(parents=True)
    (folder / "notes.txt").write_text("three weeks of notes\n")
    (folder / "sub" / "weights.bin").write_bytes(bytes(range(256)))
    file = root / "theirs.txt"
    file.write_text("a file, not a folder\n")
    return folder, file


def _refused(capsys, target: Path, said: str, forcible: bool) -> None:
    """One `error:` line on stderr, naming `target` and saying `said`, and, if `forcible`, that
    --force replaces what it names (else no word of --force); nothing on stdout."""
    out, err = capsys.readouterr()
    assert out == "" and err.count("\n") == 1 and "Traceback" not in err, err
    assert err.startswith("error: --") and str(target) in err and said in err, err
    assert (f"add --force to replace {target}" in err) if forcible else ("--force" not in err), err


FOLDER_TOOLS = {
    "models": lambda out, *extra: models.main(["tiny", "--out", str(out), *extra]),
    "toy_arithmetic": lambda out, *extra: data.main(
        ["toy_arithmetic", "--out", str(out), "--n-train", "8", "--n-test", "4", *extra]
    ),
    "prepare": lambda out, *extra: data.main(["prepare", "math", "--out", str(out), *extra]),
}


@pytest.mark.parametrize("tool", list(FOLDER_TOOLS))
def test_an_out_folder_the_tool_did_not_make_is_kept_byte_for_byte_and_replaced_only_with_force(
    tool, tmp_path, capsys, monkeypatch
):
    monkeypatch.setitem(models.WARM_START, "steps", QUICK)
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")  # a prepare that downloaded first fails, not fetches
    run = FOLDER_TOOLS[tool]
    folder, file = _theirs(tmp_path)
    dead = tmp_path / "dead"
    dead.symlink_to(tmp_path / "nowhere")
    # what each target's one line says, and whether --force may replace it (never a wrong kind of path)
    refused = {
        folder: ("notes.txt", True),
        tmp_path / "new" / ".." / "theirs": ("notes.txt", True),  # `new` is made first: this is theirs/
        file: ("is a file, not a folder", False),
        file / "x": ("is a file, not a folder", False),
        dead: ("a symbolic link that leads nowhere", False),
    }
    if tool != "models":  # the data tools write two files into the folder: those must be ours
        mine = tmp_path / "mine"
        mine.mkdir()
        (mine / "train.parquet").write_bytes(b"PAR1 someone's own parquet file")
        other = tmp_path / "other"
        write_rows(
            make_rows([("Q?", "1")], data_source="o", split="test"),
            other / "test.parquet",
            {"name": "open_rs"},
        )
        odd = tmp_path / "odd"
        (odd / "train.parquet").mkdir(parents=True)
        refused |= {
            mine: ("train.parquet, not a data file of this tool", True),
            other: ("test.parquet, open_rs data", True),
            odd: ("train.parquet is a folder, not a file", False),
        }
    before = _tree(tmp_path)
    for target, (said, forcible) in refused.items():
        for extra in [[]] + ([] if forcible else [["--force"]]):
            assert run(target, *extra) == 2, (target, extra)
            _refused(capsys, target, said, forcible)
            assert _tree(tmp_path) == before, (target, extra)  # byte for byte, and nothing added

    if tool == "prepare":
        return  # its --force would download; the refusal came before any download
    assert run(folder, "--force") == 0
    if tool == "models":  # a model folder is replaced whole
        assert models.is_complete(folder) and not (folder / "notes.txt").exists()
    else:  # the two data files are written beside what was there, which stays
        assert validate_parquet(folder / "train.parquet") == 8
        theirs = {k: v for k, v in before.items() if k.startswith("theirs")}
        assert {k: v for k, v in _tree(tmp_path).items() if k in theirs} == theirs
    made = _tree(folder)
    assert run(folder) == 0  # the tool's own folder: no --force needed again
    assert _tree(folder) == made  # the same build, the same data


def _rephrase_argv(src: Path, out: Path, *extra: str) -> list[str]:
    argv = ["--input", str(src), "--output", str(out), "--rephrasings", "2"]
    return argv + ["--base-url", DEAD, "--model", "m", "--verify", "0", *extra]


def test_a_rephrase_output_or_cache_the_tool_did_not_make_is_kept_byte_for_byte_and_replaced_only_with_force(
    tmp_path, capsys
):
    rows = make_rows([("What is 2 + 3?", "5"), ("What is 7 - 4?", "3")], data_source="d", split="train")
    src = write_rows(rows, tmp_path / "in.parquet", {"name": "d"})  # written by `data`, not by rephrase
    folder, file = _theirs(tmp_path)
    new = tmp_path / "new.parquet"
    refused = {  # argv -> (the path named, what the line says, whether --force may replace it)
        (str(file),): (file, "is not an output of this tool", True),
        (str(src),): (src, "is not an output of this tool", True),  # the input itself
        (str(folder),): (folder, "is a folder, not a file", False),
        (str(file / "x.parquet"),): (file, "is a file, not a folder", False),
        (str(new), "--cache", str(file)): (file, "is not a cache of this tool", True),
    }
    before = _tree(tmp_path)
    for (out, *extra), (target, said, forcible) in refused.items():
        for force in [[]] + ([] if forcible else [["--force"]]):
            assert rp.main(_rephrase_argv(src, Path(out), *extra, *force)) == 2, (out, extra, force)
            _refused(capsys, target, said, forcible)
            assert _tree(tmp_path) == before, (out, extra, force)  # no output, no cache made

    # --force: an earlier run's cache holds every question, so this run asks nothing of DEAD
    cache = rp.CacheWriter(Path(f"{file}.cache.jsonl"))
    for r in rows:
        q, a = r["extra_info"]["question"], r["reward_model"]["ground_truth"]
        cache.append(
            {"key": rp.cache_key(q, "m", 2, 0, a), "question": q, "rephrasings": [f"{q} A", f"{q} B"]}
        )
    cache.close()
    assert rp.main(_rephrase_argv(src, file, "--force")) == 0, capsys.readouterr().err
    assert read_meta(file)["tool"] == "recipes.tools.rephrase" and validate_parquet(file) == 2
    questions = [r["extra_info"]["question"] for r in rows]
    assert pq.read_table(file)["rephrasings"].to_pylist() == [[f"{q} A", f"{q} B"] for q in questions]
    assert rp.main(_rephrase_argv(src, file)) == 0  # its own output: written again without --force


def test_bad_input_exits_2_in_one_line_and_every_help_exits_0(tmp_path, capsys):
    rows = make_rows([("What is 2 + 3?", "5")], data_source="d", split="train")
    rows[0]["reward_model"]["ground_truth"] = ""
    bad = tmp_path / "bad.parquet"  # breaks the schema: written around the validating writer
    pq.write_table(pa.Table.from_pylist(rows, schema=data.ROW_SCHEMA), bad)
    row_0 = f"{bad}, row 0, column 'reward_model'"
    cases = [  # (main, argv, what its one line says)
        (data.main, ["validate", str(bad)], row_0),
        (data.main, ["validate", str(tmp_path / "none.parquet")], "none.parquet: no such file"),
        (data.main, ["toy_arithmetic", "--out", str(tmp_path / "t"), "--n-train", "0"], "n_train and n_test"),
        (rp.main, _rephrase_argv(bad, tmp_path / "o.parquet"), f"invalid input: {row_0}"),
    ]
    for main, argv, said in cases:
        assert main(argv) == 2, argv
        out, err = capsys.readouterr()
        assert err.count("\n") == 1 and err.startswith("error: ") and said in err, err
    assert [p.name for p in tmp_path.iterdir()] == ["bad.parquet"]  # nothing written

    helps = [(models.main, []), (data.main, []), (rp.main, [])]
    helps += [(data.main, [cmd]) for cmd in ("toy_arithmetic", "prepare", "validate")]
    for main, argv in helps:
        with pytest.raises(SystemExit) as exit_:
            main([*argv, "--help"])
        assert exit_.value.code == 0, (main, argv)
        assert capsys.readouterr().out.startswith("usage: python -m recipes.tools.")
