"""recipes/platforms/gpu.py: the GPU launch's attention decision (flash-attn or the sdpa fallback) and
its NVIDIA driver check. The attention tests compose the real presets and run verl's own checks on
the result; the driver tests put a fake `nvidia-smi` on PATH and, where torch must look like a
CUDA build, set torch.version.cuda: both are the GPU seam, which this machine does not have."""

import os
import stat
import subprocess
import sys
from pathlib import Path

import pytest

from recipes.checks import check_config
from recipes.platforms import gpu as gp
from recipes.settings import ConfigError
from recipes.train import compose

REPO = Path(__file__).resolve().parent.parent
GPU_PRESETS = sorted(p.stem for p in (REPO / "configs" / "experiment").glob("*.yaml") if "cpu" not in p.stem)
GPU = ["model=qwen2_5_math_1_5b", "data=math_l3to5", "platform=gpu"]


def _attention(cfg):
    m = cfg.actor_rollout_ref.model
    return (m.get("override_config", {}).get("attn_implementation"), m.use_remove_padding)


@pytest.mark.parametrize("preset", GPU_PRESETS)
def test_every_gpu_preset_falls_back_to_sdpa_without_flash_attn_and_passes_verls_checks(preset):
    cfg = compose([f"experiment={preset}"])
    assert _attention(cfg) == (None, True)  # verl's default: FlashAttention 2, padding removed
    line = gp.resolve_attention(cfg, flash_available=False)
    assert _attention(cfg) == ("sdpa", False)
    assert line.startswith("attention: flash-attn is not installed, so PyTorch's sdpa with padding kept")
    assert "pip install flash-attn --no-build-isolation" in line and "\n" not in line
    check_config(cfg)  # ours and verl's validate_config accept the fallback


def test_with_flash_attn_the_preset_is_left_as_it_is():
    cfg = compose(GPU)
    assert gp.resolve_attention(cfg, flash_available=True) is None
    assert _attention(cfg) == (None, True)


def test_attention_choices():
    # flash: refused without the package, in one line that says how to get it
    with pytest.raises(
        ConfigError, match=r"recipes.attention=flash needs the flash-attn package.*pip install"
    ):
        gp.resolve_attention(compose([*GPU, "recipes.attention=flash"]), flash_available=False)
    # sdpa: even when flash-attn is installed
    cfg = compose([*GPU, "recipes.attention=sdpa"])
    assert (
        gp.resolve_attention(cfg, flash_available=True)
        == "attention: PyTorch's sdpa, padding kept (recipes.attention=sdpa)"
    )
    assert _attention(cfg) == ("sdpa", False)
    with pytest.raises(ConfigError, match=r"recipes.attention=fast: one of auto, flash, sdpa"):
        gp.resolve_attention(compose([*GPU, "recipes.attention=fast"]), flash_available=False)
    # an implementation set by hand is used as given
    cfg = compose([*GPU, "+actor_rollout_ref.model.override_config.attn_implementation=eager"])
    assert gp.resolve_attention(cfg, flash_available=False) is None
    assert _attention(cfg) == ("eager", True)
    # the CPU platform sets sdpa itself: nothing to decide
    cfg = compose(["experiment=demo_cpu"])
    assert gp.resolve_attention(cfg, flash_available=False) is None
    assert _attention(cfg) == ("sdpa", False)


def test_ulysses_sequence_parallelism_without_flash_attn_is_refused():
    cfg = compose([*GPU, "actor_rollout_ref.actor.ulysses_sequence_parallel_size=2"])
    with pytest.raises(ConfigError, match=r"ulysses_sequence_parallel_size=2 needs remove-padding"):
        gp.resolve_attention(cfg, flash_available=False)
    assert _attention(cfg) == (None, True)  # nothing changed


# ------------------------------------------------------------------------------------ driver
@pytest.mark.parametrize(
    ("driver", "cuda", "ok"),
    [
        ("580.65.06", "13.0", True),
        ("590.44.01", "13.0", True),
        ("575.57.08", "13.0", False),  # the last R575 driver: CUDA 12.9 at most
        ("550.163.01", "13.0", False),
        ("525.60.13", "12.8", True),
        ("520.61.05", "12.1", False),
    ],
)
def test_driver_against_torchs_cuda(driver, cuda, ok):
    if ok:
        assert gp.check_driver(driver, cuda) == (
            f"driver: NVIDIA {driver} (R{gp.MIN_DRIVER[int(cuda[:2])]}+ needed for CUDA {cuda}): ok"
        )
    else:
        need = gp.MIN_DRIVER[int(cuda.split(".")[0])]
        with pytest.raises(ConfigError) as err:
            gp.check_driver(driver, cuda)
        msg = str(err.value)
        assert f"NVIDIA driver {driver} is too old for torch's CUDA {cuda}" in msg
        assert f"R{need} series or newer" in msg and "\n" not in msg


def test_no_driver_and_cpu_torch_are_named():
    with pytest.raises(ConfigError, match=r"no NVIDIA driver on this node \(nvidia-smi not found\)"):
        gp.check_driver(None, "13.0")
    with pytest.raises(ConfigError, match=r"this torch is a CPU build"):
        gp.check_driver("580.65.06", None)
    with pytest.raises(ConfigError, match=r"CUDA 14.0, which this check does not know"):
        gp.check_driver("600.1", "14.0")


def _fake_nvidia_smi(folder: Path, body: str) -> dict:
    exe = folder / "nvidia-smi"
    exe.write_text(f"#!/bin/sh\n{body}\n")
    exe.chmod(exe.stat().st_mode | stat.S_IEXEC)
    return {**os.environ, "PATH": f"{folder}:{os.environ['PATH']}"}


def test_driver_version_reads_a_fake_nvidia_smi(tmp_path, monkeypatch):
    env = _fake_nvidia_smi(tmp_path, 'echo "550.54.15"; echo "550.54.15"')  # one line per GPU
    monkeypatch.setenv("PATH", env["PATH"])
    assert gp.driver_version() == "550.54.15"
    _fake_nvidia_smi(tmp_path, 'echo "NVIDIA-SMI has failed because it could not communicate" >&2; exit 9')
    with pytest.raises(ConfigError, match=r"nvidia-smi failed \(exit 9\): NVIDIA-SMI has failed"):
        gp.driver_version()


def test_driver_command_with_a_fake_nvidia_smi_and_a_fake_cuda_13_torch(tmp_path):
    """`python -m recipes.platforms.gpu driver` as train.sbatch runs it on each node; torch here is
    a CPU build, so the child sets torch.version.cuda to what PyPI's GPU wheel reports."""
    code = (
        "import sys, torch; torch.version.cuda = '13.0'; "
        "from recipes.platforms.gpu import main; sys.exit(main(['driver']))"
    )
    for driver, rc in (("570.172.08", 2), ("580.82.07", 0)):
        env = _fake_nvidia_smi(tmp_path, f'echo "{driver}"')
        proc = subprocess.run(
            [sys.executable, "-c", code], env=env, cwd=REPO, capture_output=True, text=True, timeout=120
        )
        assert proc.returncode == rc, proc.stderr
        if rc:
            assert proc.stdout == ""
            assert proc.stderr == (
                f"config error: NVIDIA driver {driver} is too old for torch's CUDA 13.0, which needs the "
                "R580 series or newer: ask your admins for a driver >= 580, or install a torch built for "
                "an older CUDA (docs/running.md#the-gpu-environment).\n"
            )
        else:
            assert proc.stdout == f"driver: NVIDIA {driver} (R580+ needed for CUDA 13.0): ok\n"
