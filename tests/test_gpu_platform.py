"""recipes/platforms/gpu.py: the GPU launch's attention decision (flash-attn or the sdpa fallback) and
its NVIDIA driver check. The attention tests compose the real presets and run verl's own checks on
the result; the driver tests put a fake `nvidia-smi` on PATH and, where torch must look like a
CUDA build, set torch.version.cuda: both are the GPU seam, which this machine does not have. The
offline tests build a real Hugging Face cache layout in a temporary folder (HF_HOME) and stand a
local HTTP server where the Hub would be (HF_ENDPOINT), or name a closed port for a node without
network."""

import http.server
import json
import os
import socket
import stat
import subprocess
import sys
import threading
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


# ------------------------------------------------------------------- the driver-check override
def test_the_override_skips_only_the_version_comparison_and_says_why(monkeypatch):
    """RECIPES_SKIP_DRIVER_CHECK=1: an R550 driver under CUDA 13.0 (refused without it) passes with
    one line naming what was not compared and why one sets it; a missing driver and a CPU torch
    still stop the launch; 0 keeps the check; any other value is one sentence."""
    monkeypatch.setenv("RECIPES_SKIP_DRIVER_CHECK", "1")
    line = gp.check_driver("550.54.15", "13.0")
    assert line == (
        "driver: NVIDIA 550.54.15, not compared with the R580+ that torch's CUDA 13.0 needs "
        "(RECIPES_SKIP_DRIVER_CHECK=1: for nodes that run a newer CUDA on an older driver through "
        "NVIDIA's CUDA forward-compatibility libraries)"
    )
    assert gp.check_driver("525.60.13", "12.8").startswith(
        "driver: NVIDIA 525.60.13, not compared with the R525+"
    )
    with pytest.raises(ConfigError, match=r"no NVIDIA driver on this node"):
        gp.check_driver(None, "13.0")
    with pytest.raises(ConfigError, match=r"this torch is a CPU build"):
        gp.check_driver("550.54.15", None)
    monkeypatch.setenv("RECIPES_SKIP_DRIVER_CHECK", "0")
    with pytest.raises(ConfigError, match=r"NVIDIA driver 550.54.15 is too old for torch's CUDA 13.0"):
        gp.check_driver("550.54.15", "13.0")
    monkeypatch.setenv("RECIPES_SKIP_DRIVER_CHECK", "maybe")
    with pytest.raises(ConfigError) as err:
        gp.check_driver("590.44.01", "13.0")
    assert str(err.value) == (
        "RECIPES_SKIP_DRIVER_CHECK='maybe': 1 skips the NVIDIA driver-version check, 0 or unset keeps it."
    )


def test_the_driver_command_with_the_override_on_an_old_driver(tmp_path):
    """The command train.sbatch runs on every node, with the override inherited from the job."""
    code = (
        "import sys, torch; torch.version.cuda = '13.0'; "
        "from recipes.platforms.gpu import main; sys.exit(main(['driver']))"
    )
    env = {**_fake_nvidia_smi(tmp_path, 'echo "570.172.08"'), "RECIPES_SKIP_DRIVER_CHECK": "1"}
    proc = subprocess.run(
        [sys.executable, "-c", code], env=env, cwd=REPO, capture_output=True, text=True, timeout=120
    )
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.startswith(
        "driver: NVIDIA 570.172.08, not compared with the R580+ that torch's CUDA 13.0"
    )
    assert "forward-compatibility" in proc.stdout and proc.stdout.count("\n") == 1


# ------------------------------------------------------------------- offline: the HF cache
def hf_snapshot(hub: Path, repo_id: str, files: dict[str, str], commit: str = "0" * 40) -> Path:
    """A model in a Hugging Face hub cache, laid out as huggingface_hub lays it out:
    models--ORG--NAME/refs/main holding the commit, snapshots/<commit>/<files> (tiny contents: the
    layout is what is read)."""
    repo = hub / ("models--" + repo_id.replace("/", "--"))
    (repo / "refs").mkdir(parents=True, exist_ok=True)
    (repo / "refs" / "main").write_text(commit)
    snapshot = repo / "snapshots" / commit
    snapshot.mkdir(parents=True, exist_ok=True)
    for name, text in files.items():
        (snapshot / name).write_text(text)
    return snapshot


WHOLE = {"config.json": "{}", "tokenizer_config.json": "{}", "model.safetensors": "w"}
SHARDED_INDEX = json.dumps(
    {"weight_map": {"a": "model-00001-of-00002.safetensors", "b": "model-00002-of-00002.safetensors"}}
)


def test_a_hub_snapshot_counts_only_when_the_whole_model_is_cached(tmp_path):
    hub = tmp_path / "hub"
    snap = hf_snapshot(hub, "org/whole", WHOLE)
    assert gp.hub_snapshot("org/whole", hub) == snap
    # what recipes.checks fetches alone (config.json) is not a model
    hf_snapshot(hub, "org/config-only", {"config.json": "{}"})
    assert gp.hub_snapshot("org/config-only", hub) is None
    # a sharded model: every shard its index names, or nothing
    half = {"config.json": "{}", "tokenizer_config.json": "{}", "model.safetensors.index.json": SHARDED_INDEX}
    hf_snapshot(hub, "org/sharded", {**half, "model-00001-of-00002.safetensors": "w"})
    assert gp.hub_snapshot("org/sharded", hub) is None
    full = hf_snapshot(hub, "org/sharded", {"model-00002-of-00002.safetensors": "w"})
    assert gp.hub_snapshot("org/sharded", hub) == full
    assert gp.hub_snapshot("org/absent", hub) is None
    # refs/main names another commit than the one downloaded: not this revision
    (hub / "models--org--whole" / "refs" / "main").write_text("1" * 40)
    assert gp.hub_snapshot("org/whole", hub) is None


def _closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture
def hub_server():
    """A local HTTP server standing where the Hub would be (HF_ENDPOINT): it answers every request
    with 501, and any answer means the Hub is reachable."""
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), http.server.BaseHTTPRequestHandler)
    thread = threading.Thread(target=server.serve_forever, args=(0.05,), daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()
    server.server_close()


def _offline_command(tmp_path: Path, endpoint: str, *overrides: str) -> subprocess.CompletedProcess:
    env = {
        "PATH": os.environ["PATH"],
        "HOME": str(tmp_path),
        "HF_HOME": str(tmp_path / "hf"),
        "RECIPES_CACHE": str(tmp_path / "cache"),
        "HF_ENDPOINT": endpoint,
    }
    return subprocess.run(
        [sys.executable, "-m", "recipes.offline", *overrides],
        env=env,
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=120,
    )


REPO_ID = "deepseek-ai/DeepSeek-R1-Distill-Qwen-1.5B"  # cw_grpo_open_rs's model


@pytest.fixture
def cached(tmp_path) -> tuple[Path, Path]:
    """cw_grpo_open_rs's model cached whole in HF_HOME, its data prepared in RECIPES_CACHE."""
    from recipes.tools.data import write_toy_arithmetic

    data = tmp_path / "cache" / "data" / "open_rs"
    write_toy_arithmetic(data, n_train=8, n_test=4, seed=0)
    return hf_snapshot(tmp_path / "hf" / "hub", REPO_ID, WHOLE), data


def test_offline_when_the_presets_hub_model_is_cached_and_exit_2_when_missing_without_network(
    tmp_path, cached
):
    """`python -m recipes.offline experiment=cw_grpo_open_rs` (train.sbatch's
    question) against HF_HOME and RECIPES_CACHE in a temporary folder: the hub id cached whole and
    the data prepared: `offline:`; the weights missing on a node that cannot reach the Hub: exit 2
    naming what to fetch beforehand."""
    snap, data = cached
    closed = f"http://127.0.0.1:{_closed_port()}"
    proc = _offline_command(tmp_path, closed, "experiment=cw_grpo_open_rs")
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout == (
        f"offline: everything the run reads is here (model {REPO_ID} from the Hugging Face cache, {snap}; "
        f"data {data / 'train.parquet'}, {data / 'test.parquet'}): HF_HUB_OFFLINE=1 HF_DATASETS_OFFLINE=1\n"
    )
    (snap / "model.safetensors").unlink()
    proc = _offline_command(tmp_path, closed, "experiment=cw_grpo_open_rs")
    assert proc.returncode == 2 and proc.stdout == ""
    assert proc.stderr == (
        f"config error: {REPO_ID} not in the Hugging Face cache ({tmp_path / 'hf' / 'hub'}) and this node "
        f"cannot reach {closed}: fetch it beforehand on a machine with network, with the same HF_HOME: "
        f"hf download {REPO_ID}\n"
    )


def test_a_missing_hub_model_is_downloaded_when_the_hub_answers_and_missing_data_is_named(
    tmp_path, cached, hub_server
):
    snap, _ = cached
    (snap / "model.safetensors").unlink()
    proc = _offline_command(tmp_path, hub_server, "experiment=cw_grpo_open_rs")
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout == (
        f"online: {REPO_ID} not in the Hugging Face cache ({tmp_path / 'hf' / 'hub'}), so the run downloads it "
        f"from {hub_server} and HF_HUB_OFFLINE stays unset (for nodes without network, fetch it beforehand: "
        f"hf download {REPO_ID})\n"
    )
    # a local model folder and data that is not there: nothing to download, the command named
    model = tmp_path / "model"
    model.mkdir()
    (model / "config.json").write_text("{}")
    proc = _offline_command(
        tmp_path,
        hub_server,
        "experiment=cw_grpo_open_rs",
        f"actor_rollout_ref.model.path={model}",
        "data=deepscaler",
    )
    where = tmp_path / "cache" / "data" / "deepscaler"
    assert proc.returncode == 2
    assert proc.stderr == (
        f"config error: no train.parquet or test.parquet in {where} "
        f"(python -m recipes.tools.data prepare deepscaler --out {where})\n"
    )


def test_hub_reachable_is_any_answer_and_never_asked_under_hf_hub_offline(hub_server, monkeypatch):
    monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)
    monkeypatch.setenv("NO_PROXY", "127.0.0.1")
    assert gp.hub_reachable(hub_server) is True  # a 501 is an answer
    assert gp.hub_reachable(f"http://127.0.0.1:{_closed_port()}") is False
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")  # the user says there is no network: not asked
    assert gp.hub_reachable(hub_server) is False
