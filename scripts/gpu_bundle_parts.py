"""The file work behind scripts/gpu_bundle.py's bundle: which wheel files install on the bare
machine (CPython 3.12, Linux x86_64), Ray's wheel cut down to a tar.xz (RAY_DROP), and the working
tree's files that go into repo/. Standard library only, like gpu_bundle.py, which imports it from
the script's own folder (it is not run on its own). The bundle copies it as one of the repo's files.
"""

from __future__ import annotations

import base64
import hashlib
import io
import os
import re
import shutil
import subprocess
import tarfile
import zipfile
from pathlib import Path

from wheelhouse import canonical  # the script's folder is on sys.path (gpu_bundle.py puts it there)

REPO = Path(__file__).resolve().parents[1]

# Parts of Ray's wheel the bundle leaves out (path prefixes inside the wheel), and file endings.
RAY_DROP = (
    "ray/jars/",  # Java workers
    "ray/dashboard/client/",  # the dashboard's web UI (include_dashboard=False)
    "ray/rllib/",
    "ray/tune/",
    "ray/train/",
    "ray/serve/",
    "ray/data/",
    "ray/llm/",
    "ray/air/",  # only tune/train/data/serve import it
    "ray/workflow/",
    "ray/util/dask/",
    "ray/util/spark/",
    "ray/includes/",  # Cython declarations (.pxd), used only to build Ray
    "ray/_private/runtime_env/agent/thirdparty_files/",  # aiohttp & co.: the machine has them
    "ray/setup-dev.py",
)
RAY_DROP_SUFFIXES = (".pyi", ".pxd", ".js.map")


# ------------------------------------------------------------------------------------- wheels
def wheel_fits(filename: str) -> bool:
    """Whether a wheel file installs on CPython 3.12, Linux x86_64 (manylinux) or anywhere."""
    parts = filename[: -len(".whl")].split("-")
    if len(parts) < 5:
        return False
    pys, abis, plats = (set(p.split(".")) for p in parts[-3:])
    py_ok = bool(pys & {"cp312", "py3", "py312"}) or (
        "abi3" in abis and any(re.fullmatch(r"cp3(\d+)", p) and int(p[3:]) <= 12 for p in pys)
    )
    plat_ok = "any" in plats or any(re.fullmatch(r"manylinux(1|2010|2014|_2_\d+)_x86_64", p) for p in plats)
    return py_ok and plat_ok


def find_wheel(folder: Path, name: str, version: str) -> Path | None:
    for path in sorted(folder.glob("*.whl")):
        parts = path.name.split("-")
        if canonical(parts[0]) == canonical(name) and parts[1] == version and wheel_fits(path.name):
            return path
    return None


# ---------------------------------------------------------------------------------------- ray
def keep_ray_path(path: str) -> bool:
    """Whether a file of Ray's wheel goes into the bundle (its dist-info is kept, RECORD rewritten)."""
    if path.startswith(RAY_DROP) or path.endswith(RAY_DROP_SUFFIXES):
        return False
    return not path.endswith("/")


def record_line(path: str, data: bytes) -> str:
    digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
    return f"{path},sha256={digest},{len(data)}"


def slim_ray(wheel: Path, out: Path) -> tuple[int, int]:
    """Writes the kept files of Ray's wheel to `out` (tar.xz, modes kept, reproducible);
    returns (files kept, bytes unpacked)."""
    kept, size = 0, 0
    with zipfile.ZipFile(wheel) as z, tarfile.open(out, "w:xz", preset=9) as tar:
        infos = sorted((i for i in z.infolist() if keep_ray_path(i.filename)), key=lambda i: i.filename)
        record = next(i.filename for i in z.infolist() if i.filename.endswith(".dist-info/RECORD"))
        lines = []
        for info in infos:
            if info.filename == record:
                continue
            data = z.read(info)
            lines.append(record_line(info.filename, data))
            mode = (info.external_attr >> 16) & 0o777 or 0o644
            add_file(tar, info.filename, data, mode)
            kept, size = kept + 1, size + len(data)
        data = ("\n".join([*lines, f"{record},,"]) + "\n").encode()
        add_file(tar, record, data, 0o644)
    return kept + 1, size + len(data)


def add_file(tar: tarfile.TarFile, name: str, data: bytes, mode: int) -> None:
    info = tarfile.TarInfo(name)
    info.size, info.mode, info.mtime = len(data), mode, 0
    tar.addfile(info, io.BytesIO(data))


# --------------------------------------------------------------------------------------- repo
def repo_files(repo: Path = REPO) -> list[str]:
    """The working tree's tracked and untracked-but-not-ignored files, less docs/results/ and the
    images under docs/ (deleted files are skipped)."""
    proc = subprocess.run(
        ["git", "-C", str(repo), "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
        capture_output=True,
        text=True,
        check=True,
    )
    out = set()
    for rel in proc.stdout.split("\0"):
        if not rel or rel.startswith("docs/results/"):
            continue
        if rel.startswith("docs/") and rel.lower().endswith((".png", ".jpg", ".jpeg")):
            continue
        if (repo / rel).is_file() or (repo / rel).is_symlink():
            out.add(rel)
    return sorted(out)


def git_state(repo: Path = REPO) -> tuple[str, bool]:
    def git(*args: str) -> str:
        return subprocess.run(["git", "-C", str(repo), *args], capture_output=True, text=True).stdout.strip()

    return git("rev-parse", "HEAD"), bool(git("status", "--porcelain"))


def copy_repo(dest: Path, repo: Path = REPO) -> int:
    size = 0
    for rel in repo_files(repo):
        src, dst = repo / rel, dest / rel
        dst.parent.mkdir(parents=True, exist_ok=True)
        if src.is_symlink():
            os.symlink(os.readlink(src), dst)
            continue
        shutil.copy2(src, dst)
        size += dst.stat().st_size
    return size
