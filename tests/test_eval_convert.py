"""eval.convert with verl's real model merger on checkpoints in verl's FSDP layout written here from
the tiny model (plain replicated tensors, which the merger accepts for any world size): weights
survive the merge, conversion is skipped when done, leftovers are cleaned, a failed or incomplete
checkpoint leaves nothing behind, and the step selection. The checkpoints of a real training run
are converted in test_eval_e2e.py. Then recipes/checkpoints.py's retention on the same checkpoints
(a real training run with retention: the DAPO + ProRL plateau run of tests/test_train_e2e.py)."""

import json
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file
from transformers import AutoModelForCausalLM

from eval import convert as cv
from recipes import checkpoints as ck
from recipes.tools import models
from recipes.train import ConfigError, compose

REPO = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def tiny(tmp_path_factory) -> Path:
    return models.build_tiny(tmp_path_factory.mktemp("tiny") / "model", seed=0, warm_start_steps=0)


def write_checkpoint(model_dir: Path, step_dir: Path, world_size: int = 1) -> dict[str, torch.Tensor]:
    """verl's layout: actor/fsdp_config.json, actor/model_world_size_W_rank_R.pt, actor/huggingface/."""
    actor = step_dir / "actor"
    (actor / "huggingface").mkdir(parents=True)
    for f in model_dir.iterdir():
        if f.suffix in (".json", ".jinja") and not f.name.startswith("."):
            shutil.copy(f, actor / "huggingface" / f.name)
    state = AutoModelForCausalLM.from_pretrained(model_dir).state_dict()
    (actor / "fsdp_config.json").write_text(json.dumps({"FSDP_version": 2, "world_size": world_size}))
    for rank in range(world_size):
        torch.save(state, actor / f"model_world_size_{world_size}_rank_{rank}.pt")
    return state


@pytest.mark.parametrize("world_size", [1, 2])
def test_merged_weights_equal_the_checkpoint_in_bf16(tiny, tmp_path, world_size):
    state = write_checkpoint(tiny, tmp_path / "ckpt" / "global_step_5", world_size)
    target, done = cv.convert(tmp_path / "ckpt" / "global_step_5", tmp_path / "hf" / "global_step_5")
    assert done and target == (tmp_path / "hf" / "global_step_5").resolve()
    merged = load_file(target / "model.safetensors")
    assert merged and set(merged) <= set(state)
    for name, tensor in merged.items():
        assert tensor.dtype == torch.bfloat16  # what verl's merger writes
        assert torch.equal(tensor, state[name].to(torch.bfloat16)), name
    stamp = json.loads((target / cv.STAMP).read_text())
    assert (
        stamp["source"] == str((tmp_path / "ckpt" / "global_step_5").resolve()) and stamp["verl"] == "0.9.1"
    )
    assert (target / "model.safetensors").stat().st_mode & 0o777 == 0o644
    assert AutoModelForCausalLM.from_pretrained(target).config.architectures == ["Qwen2ForCausalLM"]
    assert list(target.parent.iterdir()) == [target]  # no temporary folder left


def test_converted_is_skipped_leftovers_are_replaced_and_a_folder_not_ours_is_kept(tiny, tmp_path):
    step = tmp_path / "ckpt" / "global_step_1"
    write_checkpoint(tiny, step)
    target = tmp_path / "hf" / "global_step_1"
    cv.convert(step, target)
    mtime = (target / "model.safetensors").stat().st_mtime_ns
    assert cv.convert(step, target) == (target.resolve(), False)
    assert (target / "model.safetensors").stat().st_mtime_ns == mtime
    # a killed conversion's temporary folder is removed; an empty target folder is filled
    (tmp_path / "hf" / ".global_step_1.tmp-dead").mkdir()
    shutil.rmtree(target)
    target.mkdir()
    assert cv.convert(step, target) == (target.resolve(), True)
    assert cv.is_converted(target) and (target / "model.safetensors").stat().st_size > 1000
    assert sorted(p.name for p in (tmp_path / "hf").iterdir()) == ["global_step_1"]
    # a target with content and no stamp is someone else's: refused, not replaced (it was deleted)
    (target / cv.STAMP).unlink()
    (target / "notes.txt").write_text("mine")
    with pytest.raises(ValueError, match=r"global_step_1 exists and was not written by eval.convert"):
        cv.convert(step, target)
    assert (target / "notes.txt").read_text() == "mine"


def test_a_failed_merge_leaves_nothing(tiny, tmp_path):
    step = tmp_path / "ckpt" / "global_step_1"
    write_checkpoint(tiny, step)
    shard = step / "actor" / "model_world_size_1_rank_0.pt"
    shard.write_bytes(shard.read_bytes()[: shard.stat().st_size // 2])  # a copy cut short
    with pytest.raises(
        cv.IncompleteCheckpoint, match=r"global_step_1: verl's merger cannot read it \(\w+Error: "
    ):
        cv.convert(step, tmp_path / "hf" / "global_step_1")
    assert list((tmp_path / "hf").iterdir()) == []
    shard.write_bytes(b"not a torch file")
    with pytest.raises(cv.IncompleteCheckpoint, match="verl's merger cannot read it"):
        cv.convert(step, tmp_path / "hf" / "global_step_1")


def test_incomplete_checkpoints_name_what_is_missing(tiny, tmp_path):
    step = tmp_path / "ckpt" / "global_step_7"
    write_checkpoint(tiny, step, world_size=2)
    (step / "actor" / "model_world_size_2_rank_1.pt").unlink()
    with pytest.raises(
        cv.IncompleteCheckpoint, match=r"global_step_7: missing or empty actor/model_world_size_2_rank_1.pt"
    ):
        cv.convert(step, tmp_path / "hf" / "global_step_7")
    assert not (tmp_path / "hf").exists() or list((tmp_path / "hf").iterdir()) == []
    (step / "actor" / "model_world_size_2_rank_1.pt").write_bytes(b"")
    with pytest.raises(cv.IncompleteCheckpoint, match="missing or empty actor/model_world_size_2_rank_1.pt"):
        cv.check_checkpoint(step)
    (step / "actor" / "fsdp_config.json").unlink()
    with pytest.raises(cv.IncompleteCheckpoint, match="missing actor/fsdp_config.json"):
        cv.check_checkpoint(step)
    (step / "actor" / "fsdp_config.json").write_text('{"world_size": "two"}')
    with pytest.raises(cv.IncompleteCheckpoint, match="no valid world_size"):
        cv.check_checkpoint(step)
    # a world size no disk holds is refused at once (it was a silent loop, killed at 115 s). The
    # check's own CPU time (this thread's: other processes' load does not count) is 0.2 ms here;
    # looking for each rank's file, as that loop did, gets through ~130,000 ranks a CPU second
    (step / "actor" / "fsdp_config.json").write_text('{"world_size": 1000000000}')
    t0 = time.thread_time()
    with pytest.raises(
        cv.IncompleteCheckpoint, match=r"world_size 1000000000 is more than the \d+ files in actor/"
    ):
        cv.check_checkpoint(step)
    assert time.thread_time() - t0 < 1.0
    shutil.rmtree(step / "actor")
    with pytest.raises(cv.IncompleteCheckpoint, match="no actor/ folder"):
        cv.check_checkpoint(step)


def test_step_discovery_and_selection(tmp_path):
    for name in ("global_step_20", "global_step_5", "global_step_100", "global_step_x", "other"):
        (tmp_path / name).mkdir()
    (tmp_path / "global_step_40").write_text("a file, not a checkpoint")
    steps = ck.find_steps(tmp_path)
    assert list(steps) == [5, 20, 100]
    assert cv.select_steps(list(steps)) == [5, 20, 100]
    assert cv.select_steps(list(steps), every=20) == [20, 100]
    assert cv.select_steps(list(steps), only=[100, 5]) == [5, 100]
    with pytest.raises(ValueError, match=r"no global_step_N folder for step\(s\) \[7\]"):
        cv.select_steps(list(steps), only=[7])
    with pytest.raises(ValueError, match="either --every or --steps"):
        cv.select_steps(list(steps), every=2, only=[5])
    assert ck.latest_step(tmp_path) is None
    (tmp_path / ck.TRACKER).write_text("20")
    assert ck.latest_step(tmp_path) == 20
    assert ck.default_hf_root(tmp_path / "checkpoints") == tmp_path.resolve() / "hf"


def test_cli_converts_good_steps_and_reports_incomplete_ones(tiny, tmp_path):
    root = tmp_path / "checkpoints"
    write_checkpoint(tiny, root / "global_step_1")
    write_checkpoint(tiny, root / "global_step_2")
    write_checkpoint(tiny, root / "global_step_3")
    (root / "global_step_2" / "actor" / "huggingface" / "config.json").unlink()
    config = root / "global_step_3" / "actor" / "huggingface" / "config.json"
    good_config = config.read_text()
    config.write_text(good_config[: len(good_config) // 2])  # truncated, not empty

    def run():
        return subprocess.run(
            [sys.executable, "-m", "eval.convert", str(root)],
            cwd=REPO,
            capture_output=True,
            text=True,
            timeout=300,
        )

    proc = run()
    assert proc.returncode == 1, proc.stderr[-2000:]
    assert f"step 1 (1/3): converted -> {tmp_path.resolve() / 'hf' / 'global_step_1'}" in proc.stdout
    assert (
        "step 2 (2/3): skipped:" in proc.stderr
        and "missing or empty actor/huggingface/config.json" in proc.stderr
    )
    assert "step 3 (3/3): skipped:" in proc.stderr and "verl's merger cannot read it" in proc.stderr
    assert "Traceback" not in proc.stderr
    assert sorted(p.name for p in (tmp_path / "hf").iterdir()) == ["global_step_1"]
    config.write_text(good_config)  # repaired: the next pass converts it
    shutil.rmtree(root / "global_step_2")
    proc = run()
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert "step 1 (1/2): already converted" in proc.stdout and "step 3 (2/2): converted" in proc.stdout


# ------------------------------------------------------------------ retention (recipes/checkpoints.py)
def save(tiny_dir: Path, root: Path, step: int) -> Path:
    """What verl writes for one save: the actor (parameters; optimizer states), data.pt, the tracker."""
    folder = root / f"global_step_{step}"
    write_checkpoint(tiny_dir, folder)
    (folder / "actor" / "optim_world_size_1_rank_0.pt").write_bytes(b"\0" * 4096)
    torch.save({"epoch": 0}, folder / "data.pt")
    (folder / "recipes_state.json").write_text(json.dumps({"global_steps": step}))
    (folder / "prorl_reference").mkdir()
    (folder / "prorl_reference" / "shard.pt").write_bytes(b"\0" * 100)
    (root / "latest_checkpointed_iteration.txt").write_text(str(step))
    return folder


def test_older_saves_keep_only_their_hf_weights(tiny, tmp_path):
    root = tmp_path / "run" / "checkpoints"
    said = []
    keep = ck.Retention(root, keep_full=1, say=said.append)
    sizes = {}
    for step in (1, 2, 3):
        folder = save(tiny, root, step)
        records = {folder / "recipes_state.json"}  # the step folder's own JSON files stay
        sizes[step] = sum(f.stat().st_size for f in folder.rglob("*") if f.is_file() and f not in records)
        keep.after_save()
        assert (folder / "actor").is_dir()  # the newest save is never pruned
    keep.finish()
    hf = tmp_path / "run" / "hf"
    assert sorted(p.name for p in hf.iterdir()) == ["global_step_1", "global_step_2", "global_step_3"]
    assert all(ck.is_converted(p) for p in hf.iterdir())
    for step in (1, 2):
        folder = root / f"global_step_{step}"
        # only the JSON records are left, and the note saying where the weights went
        assert sorted(p.name for p in folder.iterdir()) == ["pruned.json", "recipes_state.json"]
        note = json.loads((folder / "pruned.json").read_text())
        assert note == {
            "hf": str(hf / f"global_step_{step}"),
            "freed_bytes": sizes[step],
            "kept_whole": [step + 1],
        }
        # eval.iterate's conversion takes the HF folder as done
        assert cv.convert(folder, hf / f"global_step_{step}") == (hf / f"global_step_{step}", False)
    assert (root / "global_step_3" / "actor" / "optim_world_size_1_rank_0.pt").is_file()
    assert said[-1].startswith(f"[checkpoints] HF weights up to date in {hf}")
    assert sum("parameters and optimizer states removed" in line for line in said) == 2


def test_a_failed_conversion_keeps_the_checkpoint_whole_and_is_retried(tiny, tmp_path):
    root = tmp_path / "checkpoints"
    said = []
    keep = ck.Retention(root, keep_full=1, say=said.append)
    first = save(tiny, root, 1)
    shard = first / "actor" / "model_world_size_1_rank_0.pt"
    good = shard.read_bytes()
    shard.write_bytes(good[: len(good) // 2])  # truncated
    keep.after_save()
    save(tiny, root, 2)
    keep.after_save()  # waits for step 1's failed conversion: nothing pruned
    assert any("converting to HF weights failed (exit 1" in line for line in said)
    assert (first / "actor").is_dir() and not (first / "pruned.json").exists()
    shard.write_bytes(good)  # repaired: converted by the next pass, then pruned
    keep.finish()
    save(tiny, root, 3)
    keep.after_save()
    keep.finish()
    assert (first / "pruned.json").exists() and not (first / "actor").exists()
    assert ck.is_converted(tmp_path / "hf" / "global_step_1")


def test_the_setting_is_checked_before_ray():
    assert compose(["experiment=demo_cpu"]).recipes.checkpoints.keep_full is None  # verl's: keep all
    assert compose(["experiment=prompt_aug_qwen2_5_math_1_5b"]).recipes.checkpoints.keep_full == 2
    for value in ("0", "true", "'2'"):
        with pytest.raises(
            ConfigError, match=r"recipes.checkpoints.keep_full=.*newest checkpoints kept whole"
        ):
            ck.check(compose(["experiment=demo_cpu", f"recipes.checkpoints.keep_full={value}"]))
    with pytest.raises(ConfigError, match=r"trainer.max_actor_ckpt_to_keep=3 deletes old checkpoints whole"):
        ck.check(compose(["experiment=prompt_aug_qwen2_5_math_1_5b", "trainer.max_actor_ckpt_to_keep=3"]))
    ck.check(compose(["experiment=demo_cpu", "trainer.max_actor_ckpt_to_keep=3"]))  # null: verl's rule alone


# ---------------------------------------------------------------- a planted pickle is not run
class _Planted:
    """Unpickling this calls os.system: what an attacker would put in a shard."""

    def __init__(self, marker: Path):
        self.marker = marker

    def __reduce__(self):
        import os

        return (os.system, (f"touch {self.marker}",))


def test_a_shard_that_would_run_code_is_refused_by_name_and_not_run(tiny, tmp_path):
    root = tmp_path / "checkpoints"
    write_checkpoint(tiny, root / "global_step_1")
    write_checkpoint(tiny, root / "global_step_2")
    marker = tmp_path / "pwned"
    shard = root / "global_step_1" / "actor" / "model_world_size_1_rank_0.pt"
    torch.save({"model.embed_tokens.weight": _Planted(marker)}, shard)
    proc = subprocess.run(
        [sys.executable, "-m", "eval.convert", str(root)],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert not marker.exists(), "the planted pickle ran"
    assert proc.returncode == 1
    refused = [ln for ln in proc.stderr.splitlines() if ln.startswith("[convert] step 1 (1/2): skipped:")]
    assert len(refused) == 1 and f"{shard}: refused, it is not plain tensors" in refused[0], proc.stderr
    # the other step converts: plain tensors load as they did
    assert (
        cv.is_converted(tmp_path / "hf" / "global_step_2")
        and not (tmp_path / "hf" / "global_step_1").exists()
    )
    # the same shard under plain torch.load(weights_only=False) would have run it
    torch.load(shard, weights_only=False)
    assert marker.exists()


def test_step_names_are_ascii_digits_and_two_folders_for_one_step_are_refused(tmp_path, capsys):
    """`\\d` also matches "٦" (Arabic-Indic six): such a folder is not a step. `global_step_00005`
    beside `global_step_5` used to be dropped silently; both are named, and nothing is converted."""
    for name in ("global_step_5", "global_step_\u0666", "global_step_x"):
        (tmp_path / name).mkdir()
    assert list(ck.find_steps(tmp_path)) == [5]
    (tmp_path / "global_step_00005").mkdir()
    with pytest.raises(
        ck.StepFolderError, match="global_step_00005 and global_step_5 in .* both name step 5"
    ):
        ck.find_steps(tmp_path)
    assert cv.main([str(tmp_path)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert (
        len(err) == 1
        and err[0].startswith("error: global_step_00005 and global_step_5")
        and "remove or rename" in err[0]
    )
    assert not (tmp_path.parent / "hf").exists()
    huge = tmp_path / "huge"
    (huge / f"global_step_{10**30}").mkdir(parents=True)  # past int64: it broke eval.iterate's plot
    with pytest.raises(ck.StepFolderError, match="beyond any training run"):
        ck.find_steps(huge)


def test_a_step_link_that_leads_nowhere_is_named_not_skipped(tmp_path, capsys):
    """A symbolic-link loop named as a step was skipped with exit 0, and gave a traceback when
    passed directly: both are one line and exit 2."""
    root = tmp_path / "checkpoints"
    (root / "global_step_1").mkdir(parents=True)
    loop = root / "global_step_7"
    loop.symlink_to(loop)
    assert cv.main([str(root)]) == 2
    assert (
        capsys.readouterr().err
        == f"error: {loop} is a symbolic link that leads nowhere (a loop or a missing target)\n"
    )
    assert cv.main([str(loop)]) == 2
    assert capsys.readouterr().err == f"error: {loop} is a symbolic link loop\n"


def test_an_hf_root_inside_the_checkpoint_folder_is_refused_before_anything_is_written(tmp_path, capsys):
    """Converted models inside the checkpoint folder would be read back as checkpoints (and pruned);
    it gave a traceback and left hf/ behind."""
    from eval import iterate

    root = tmp_path / "checkpoints"
    (root / "global_step_1").mkdir(parents=True)
    assert cv.main([str(root), "--hf-root", str(root / "hf")]) == 2
    assert capsys.readouterr().err == (
        f"error: --hf-root {root / 'hf'} is inside the checkpoint folder {root}: give a folder outside it\n"
    )
    assert iterate.main([str(root), "--out", str(root / "global_step_1" / "eval")]) == 2
    assert "error: --out" in capsys.readouterr().err
    assert (
        sorted(p.name for p in root.iterdir()) == ["global_step_1"]
        and list((root / "global_step_1").iterdir()) == []
    )
    assert not (tmp_path / "hf").exists() and not (tmp_path / "eval").exists()


# ------------------------------------------------ a malformed step is skipped by name, the others go on
def test_a_shard_that_is_a_list_a_string_or_of_the_wrong_shape_and_a_damaged_model_skip_their_step_by_name(
    tiny, tmp_path, capsys
):
    """Each stopped eval.convert with a traceback (a list or a string shard), or was converted and
    stamped (a tensor of the wrong shape), or was "already converted" (a stamped model whose
    model.safetensors was cut short since). Now each is one line naming its file and why, and the
    good step converts."""
    root = tmp_path / "checkpoints"
    for step in (1, 2, 3, 4, 5):
        write_checkpoint(tiny, root / f"global_step_{step}")
    shard = "actor/model_world_size_1_rank_0.pt"
    torch.save([1, 2], root / "global_step_1" / shard)
    torch.save("a string", root / "global_step_2" / shard)
    state = torch.load(root / "global_step_3" / shard)
    state["model.embed_tokens.weight"] = state["model.embed_tokens.weight"][:, :-1].clone()  # [768, 63]
    torch.save(state, root / "global_step_3" / shard)
    hf = tmp_path / "hf"
    damaged = cv.convert(root / "global_step_5", hf / "global_step_5")[0] / "model.safetensors"
    good = damaged.read_bytes()
    damaged.write_bytes(good[: len(good) // 2])

    capsys.readouterr()
    assert cv.main([str(root), "--no-progress"]) == 1
    out, err = capsys.readouterr()
    assert "%|" not in err  # no bar: verl's "Loading 1 FSDP shards", transformers' "Writing model shards"
    skipped = [line for line in err.splitlines() if line.startswith("[convert] step")]
    assert skipped == [
        f"[convert] step 1 (1/5): skipped: {root / 'global_step_1' / shard}: not a shard of parameters "
        "(a dict of tensors): it holds a list",
        f"[convert] step 2 (2/5): skipped: {root / 'global_step_2' / shard}: not a shard of parameters "
        "(a dict of tensors): it holds a str",
        f"[convert] step 3 (3/5): skipped: {root / 'global_step_3'}: its weights do not fit its model's "
        "config (tensor model.embed_tokens.weight has shape [768, 63], its config.json asks for [768, 64])",
        f"[convert] step 5 (5/5): skipped: {damaged}: unreadable (Error while deserializing header: "
        "incomplete metadata, file not fully covered); convert the step again with --force",
    ]
    assert "Traceback" not in err and f"step 4 (4/5): converted -> {hf / 'global_step_4'}" in out
    assert sorted(p.name for p in hf.iterdir()) == ["global_step_4", "global_step_5"]
    assert damaged.read_bytes() == good[: len(good) // 2]  # reported, not replaced unasked
    assert cv.main([str(root), "--steps", "5", "--force"]) == 0 and damaged.read_bytes() == good


def test_an_hf_root_holding_what_eval_convert_did_not_write_is_refused_and_kept(tiny, tmp_path, capsys):
    """A foreign `global_step_N` folder in HF_ROOT used to be replaced by the conversion (deleted);
    any foreign entry now refuses the whole command in one line, before anything is written."""
    root = tmp_path / "checkpoints"
    write_checkpoint(tiny, root / "global_step_1")
    hf = tmp_path / "models"
    (hf / "global_step_1").mkdir(parents=True)
    (hf / "global_step_1" / "weights.bin").write_text("mine")
    capsys.readouterr()  # what building the checkpoint printed
    assert cv.main([str(root), "--hf-root", str(hf)]) == 2
    assert capsys.readouterr().err == (
        f"error: --hf-root {hf} holds what eval.convert did not write (global_step_1): give a new or empty folder\n"
    )
    (hf / "global_step_1" / "weights.bin").unlink()
    (hf / "notes.txt").write_text("mine")
    assert cv.main([str(root), "--hf-root", str(hf)]) == 2
    assert "(notes.txt): give a new or empty folder" in capsys.readouterr().err
    assert sorted(p.name for p in hf.iterdir()) == ["global_step_1", "notes.txt"]
    assert cv.main([str(root), "--hf-root", str(hf / "notes.txt")]) == 2
    assert capsys.readouterr().err == (
        f"error: --hf-root {hf / 'notes.txt'} is a file, not a folder: give a new or empty folder\n"
    )
    assert (hf / "notes.txt").read_text() == "mine" and list((hf / "global_step_1").iterdir()) == []
