"""eval.plot: one run's accuracy-vs-step plot and the CLI that overlays several runs' results."""

import json
import struct
import subprocess
import sys
from pathlib import Path

import pytest

from eval import plot

REPO = Path(__file__).resolve().parents[1]


def write_steps(folder: Path, points: dict[int, float]) -> Path:
    """An eval.iterate results folder with steps.json: `points` step -> mean accuracy (%)."""
    folder.mkdir(parents=True)
    rows = [
        {
            "step": step,
            "model": f"hf/global_step_{step}",
            "accuracy": {
                name: {"mean": mean, "std": 2.0}
                for name in ("aime24", "math500", "per-benchmark average", "per-question average")
            },
        }
        for step, mean in points.items()
    ]
    (folder / "steps.json").write_text(json.dumps({"checkpoint_root": "x", "rows": rows, "best": {}}))
    return folder


def test_overlay_cli_plots_every_run_and_refuses_bad_input(tmp_path):
    grpo = write_steps(tmp_path / "grpo" / "eval", {10: 20.0, 20: 30.0})
    mine = write_steps(tmp_path / "prompt_aug" / "eval", {10: 25.0, 20: 40.0, 30: 45.0})
    assert plot.load_rows(grpo)[1] == {
        "step": 20,
        "series": {
            "aime24": (30.0, 2.0),
            "math500": (30.0, 2.0),
            "per-benchmark average": (30.0, 2.0),
            "per-question average": (30.0, 2.0),
        },
    }
    assert [plot.run_name(str(p)) for p in (grpo, mine / "steps.json")] == ["grpo", "prompt_aug"]
    out = tmp_path / "cmp.png"
    assert plot.main([str(grpo), str(mine / "steps.json"), "--out", str(out), "--title", "t"]) == 0
    width = struct.unpack(">I", out.read_bytes()[16:20])[0]  # the PNG header's width
    assert width == 4 * 4 * 120  # 4 panels (2 benchmarks, 2 averages) of 4 inches at 120 dpi
    assert plot.main([str(tmp_path / "nope"), "--out", str(out)]) == 2
    with pytest.raises(SystemExit) as exit_:
        plot.main([str(grpo), str(mine), "--labels", "a", "--out", str(out)])
    assert exit_.value.code == 2
    help_ = subprocess.run(
        [sys.executable, "-m", "eval.plot", "--help"], cwd=REPO, capture_output=True, text=True
    )
    assert help_.returncode == 0 and "Overlay the accuracy-vs-step curves" in help_.stdout


def test_malformed_results_and_an_unwritable_out_are_one_line_not_a_traceback(tmp_path, capsys):
    """No rows, a list where the accuracy dict goes, a NaN accuracy, a step past int64 (which
    broke matplotlib), a folder that cannot be written: one `error:` line each, exit 2."""
    good = write_steps(tmp_path / "good", {10: 20.0})
    cases = {
        "no_rows": {"rows": []},
        "list": {"rows": [{"step": 1, "accuracy": [1, 2]}]},
        "nan": {"rows": [{"step": 1, "accuracy": {"a": {"mean": float("nan"), "std": 0}}}]},
        "huge": {"rows": [{"step": 10**30, "accuracy": {"a": {"mean": 1.0, "std": 0}}}]},
    }
    out = tmp_path / "x.png"
    for name, data in cases.items():
        path = tmp_path / f"{name}.json"
        path.write_text(json.dumps(data))
        assert plot.main([str(path), "--out", str(out)]) == 2, name
        err = capsys.readouterr().err
        assert err.startswith(f"error: {path}: ") and err.count("\n") == 1, (name, err)
    assert not out.exists()
    # a folder no user can make, root included (CI runs as root, who writes past any mode bits)
    target = Path("/proc/eval-plot-test/x.png")
    code = plot.main([str(good), "--out", str(target)])
    err = capsys.readouterr().err
    assert code == 2 and err.startswith(f"error: cannot write {target}: ") and err.count("\n") == 1, err
    assert not target.parent.exists()
    file_in_the_way = tmp_path / "file"
    file_in_the_way.write_text("x")
    assert plot.main([str(good), "--out", str(file_in_the_way / "x.png")]) == 2
    assert capsys.readouterr().err.startswith(f"error: cannot write {file_in_the_way / 'x.png'}: ")


def test_an_out_eval_plot_did_not_write_is_refused_and_kept_its_own_png_is_replaced(tmp_path, capsys):
    """`--out` over an existing file replaced it, whatever it was. Now only a PNG that eval.plot
    wrote (its Software text says so) is replaced; anything else is one line, exit 2, untouched."""
    run = write_steps(tmp_path / "grpo" / "eval", {10: 20.0, 20: 30.0})
    theirs = tmp_path / "figure.png"
    theirs.write_bytes(b"\x89PNG\r\n\x1a\n" + b"someone else's picture")
    for out, what in [(theirs, "a file eval.plot did not write"), (tmp_path / "grpo", "a folder")]:
        assert plot.main([str(run), "--out", str(out)]) == 2
        assert capsys.readouterr().err == f"error: --out {out} is {what}: give a new file name\n"
    assert theirs.read_bytes() == b"\x89PNG\r\n\x1a\n" + b"someone else's picture"
    ours = tmp_path / "compare.png"
    assert plot.main([str(run), "--out", str(ours)]) == 0 and plot.made_here(ours)
    first = ours.read_bytes()
    write_steps(tmp_path / "more" / "eval", {10: 50.0})
    assert plot.main([str(run), str(tmp_path / "more" / "eval"), "--out", str(ours)]) == 0
    assert ours.read_bytes() != first and plot.made_here(ours)  # its own picture, redrawn


def test_a_single_step_plot_has_whole_step_ticks_and_a_percent_axis():
    import matplotlib.pyplot as plt

    fig = plot.figure({"": [{"step": 3, "series": {"arith": (0.0, 0.0)}}]}, title="run")
    ax = fig.axes[0]
    assert list(ax.get_xticks()) == [3]
    assert ax.get_ylim() == (0.0, 10.0)  # a 0-100 scale, not 0-1, even when every answer is wrong
    assert ax.get_ylabel() == "accuracy (%)" and fig._suptitle.get_text() == "run"
    plt.close(fig)


def test_eval_results_reach_the_training_runs_tensorboard(tmp_path):
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    from eval.iterate import log_to_tensorboard

    summary = {
        "benchmarks": {
            "math500": {"complete": True, "accuracy": {"mean": 0.42}},
            "aime24": {"complete": False, "accuracy": None},  # not finished: not logged
        },
        "per_benchmark_average": {"accuracy": {"mean": 0.42}},
        "per_question_average": {"accuracy": {"mean": 0.4}},
    }
    log_to_tensorboard(tmp_path, 20, summary)
    log_to_tensorboard(tmp_path, 40, {**summary, "per_question_average": {"accuracy": {"mean": 0.5}}})
    events = EventAccumulator(str(tmp_path))
    events.Reload()
    assert sorted(events.Tags()["scalars"]) == [
        "eval/math500",
        "eval/per-benchmark average",
        "eval/per-question average",
    ]
    points = [(e.step, round(e.value, 4)) for e in events.Scalars("eval/per-question average")]
    assert points == [(20, 40.0), (40, 50.0)]


def wandb_records(path: Path) -> list:
    """The records of an offline wandb run file (a leveldb-style log of protobuf records)."""
    from wandb.proto import wandb_internal_pb2 as pb

    data, pos, block, buf, records = path.read_bytes(), 7, 32768, b"", []  # 7: magic, key, version
    while pos + 7 <= len(data):
        left = block - pos % block
        if left < 7:
            pos += left
            continue
        _, length, kind = struct.unpack("<IHB", data[pos : pos + 7])
        pos += 7
        buf += data[pos : pos + length]
        pos += length
        if kind in (1, 4):  # a FULL record, or the LAST piece of one
            record = pb.Record()
            record.ParseFromString(buf)
            buf = b""
            records.append(record)
    return records


def wandb_history(records: list) -> list[dict]:
    """The history rows among a run file's records."""
    return [
        {i.key or "/".join(i.nested_key): json.loads(i.value_json) for i in r.history.item}
        for r in records
        if r.WhichOneof("record_type") == "history"
    ]


def test_wandb_run_is_the_newest_folders_run_even_with_wandbs_same_second_suffix(tmp_path):
    """wandb names a run's folder [offline-]run-<start second>-<id>, and adds -1, -2, ... when a
    folder of that name exists already: the id is the run file's, run-<id>.wandb."""
    from eval.iterate import wandb_run

    for name in ("offline-run-20260101_120000-ab12cd34", "offline-run-20260101_120000-ab12cd34-1"):
        (tmp_path / "wandb" / name).mkdir(parents=True)
        (tmp_path / "wandb" / name / "run-ab12cd34.wandb").write_bytes(b"")
    assert wandb_run(tmp_path) == ("ab12cd34", "offline")
    (tmp_path / "wandb" / "run-20260101_120001-ef56gh78").mkdir()  # online, a second later, no file
    assert wandb_run(tmp_path) == ("ef56gh78", "online")


@pytest.mark.slow  # two runs through wandb's service, which it then tears down
def test_eval_results_reach_the_training_runs_wandb_run(tmp_path, monkeypatch):
    """A run that logged to wandb offline into its folder (as verl's logger does with WANDB_DIR set
    by recipes.train): the eval results are logged to that same run, resumed by its id, against
    eval/training_step."""
    import wandb

    from eval.iterate import log_to_wandb, run_project, wandb_run

    monkeypatch.setenv("WANDB_MODE", "offline")
    # a service token inherited from a parent process makes wandb use that service, and then
    # teardown() returns without waiting for it (service_connection.py): start our own
    monkeypatch.delenv("WANDB_SERVICE", raising=False)
    for var in ("WANDB_CACHE_DIR", "WANDB_CONFIG_DIR", "WANDB_DATA_DIR"):  # nothing in ~/.cache
        monkeypatch.setenv(var, str(tmp_path / "wandb_home"))
    monkeypatch.chdir(tmp_path)
    (tmp_path / "config.yaml").write_text("trainer:\n  project_name: proj\n")
    assert wandb_run(tmp_path) is None and not log_to_wandb(tmp_path, "proj", 20, {"benchmarks": {}})
    train = wandb.init(
        project="proj", dir=str(tmp_path), mode="offline", settings=wandb.Settings(silent=True)
    )
    train.log({"critic/score/mean": 0.5}, step=20)
    train.finish()
    assert wandb_run(tmp_path) == (train.id, "offline") and run_project(tmp_path) == "proj"
    summary = {
        "benchmarks": {"math500": {"complete": True, "accuracy": {"mean": 0.42}}},
        "per_benchmark_average": {"accuracy": {"mean": 0.42}},
        "per_question_average": {"accuracy": {"mean": 0.4}},
    }
    assert log_to_wandb(tmp_path, "proj", 20, summary)
    # run.finish() only sends wandb's service (wandb-core) the run's end, without waiting: the
    # service writes the run's records to its file when it closes the run, after finish() has
    # returned (right after it the training run's file held only its 7-byte header). Under load
    # the test read the file first: 13 of 45 runs on 2 busy cores without this wait, 0 of 95 with
    # it. teardown() waits for the service to close every run and exit.
    wandb.teardown()
    # the resumption's folder ends in -1 when it started in the same second as the training run
    runs = sorted((tmp_path / "wandb").glob(f"offline-run-*-{train.id}*"))
    assert len(runs) == 2  # the training run, and its resumption by eval.iterate
    assert wandb_run(tmp_path) == (train.id, "offline")  # the next step resumes the same run
    files = [wandb_records(run / f"run-{train.id}.wandb") for run in runs]
    for run, records in zip(runs, files, strict=True):  # written to the end: read after the service
        assert records and records[-1].WhichOneof("record_type") == "exit", f"{run.name} is cut short"
    assert [row["critic/score/mean"] for row in wandb_history(files[0])] == [0.5]
    rows = wandb_history(files[1])
    assert len(rows) == 1
    assert rows[0]["eval/training_step"] == 20 and rows[0]["eval/math500"] == pytest.approx(42.0)
    assert rows[0]["eval/per-question average"] == pytest.approx(40.0)
