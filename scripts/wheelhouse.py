"""The file work of scripts/wheelhouse.sh: pins from pip's resolution report, the manifest, splitting
large wheels into parts, and checking and reassembling them. Standard library only, so that any
Python 3.10+ can run it on a machine where nothing is installed yet.

    python scripts/wheelhouse.py pins REPORT.json OUT.txt        # name==version per resolved package
    python scripts/wheelhouse.py finish DIR --extra cpu [--split-mb N]   # manifest (+ parts)
    python scripts/wheelhouse.py check DIR      # this interpreter can install DIR? (exit 2 if not)
    python scripts/wheelhouse.py verify DIR     # every file and part present and intact (exit 1 if not)
    python scripts/wheelhouse.py assemble DIR   # verify, then rebuild split wheels into DIR/wheels

Layout of a wheelhouse DIR:
    manifest.json        python version, implementation, platform, oldest glibc the wheels accept,
                         extra, and per wheel its name, size and sha256 (split wheels: their parts,
                         each with size and sha256)
    requirements.txt     the resolved closure, name==version (what `pip download` fetched)
    wheels/*.whl         wheels not split (and, after `assemble`, the reassembled ones)
    parts/NAME.partNNN   pieces of wheels larger than --split-mb, N MB = N x 1,000,000 bytes each

Every user error is one line on stderr: exit 2 for a wheelhouse that is not one or does not suit
this interpreter, exit 1 for a missing or corrupt file or part.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import platform
import re
import sys
import sysconfig
import time
from pathlib import Path

MANIFEST = "manifest.json"
FORMAT = 1
MB = 1_000_000
CHUNK = 1 << 20


class WheelhouseError(Exception):
    """A problem with the wheelhouse's files (exit 1)."""


class UsageError(Exception):
    """Not a wheelhouse, or one for another interpreter (exit 2)."""


# ------------------------------------------------------------------------------------ pins
def canonical(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def pins(report: dict) -> list[str]:
    """`name==version` for every package pip's `--report` would install, sorted. Local project
    folders (this project itself) are left out; packages found through a local index or
    --find-links folder are kept."""
    out = {}
    for item in report.get("install", []):
        if "dir_info" in item.get("download_info", {}):
            continue
        meta = item["metadata"]
        out[canonical(meta["name"])] = f"{canonical(meta['name'])}=={meta['version']}"
    return [out[k] for k in sorted(out)]


# ------------------------------------------------------------------------------------ tags
_GLIBC = re.compile(r"manylinux_(\d+)_(\d+)_")
_LEGACY = {"manylinux1": (2, 5), "manylinux2010": (2, 12), "manylinux2014": (2, 17)}


def glibc_needed(wheel_name: str) -> tuple[int, int] | None:
    """The oldest glibc a wheel's platform tag accepts (None for pure or non-manylinux wheels).
    A wheel with several platform tags needs only the most lenient of them."""
    stem = wheel_name.removesuffix(".whl")
    plat = stem.split("-")[-1] if stem.count("-") >= 4 else ""
    found = []
    for tag in plat.split("."):
        m = _GLIBC.match(tag + "_")
        if m:
            found.append((int(m.group(1)), int(m.group(2))))
        for legacy, version in _LEGACY.items():
            if tag.startswith(legacy + "_"):
                found.append(version)
    return min(found) if found else None


def this_interpreter() -> dict:
    libc, version = platform.libc_ver()
    return {
        "python": f"{sys.version_info.major}.{sys.version_info.minor}",
        "implementation": sys.implementation.name,
        "platform": sysconfig.get_platform(),
        "glibc": version if libc == "glibc" else None,
    }


# ------------------------------------------------------------------------------------ files
def sha256_of(paths: list[Path]) -> str:
    h = hashlib.sha256()
    for p in paths:
        with open(p, "rb") as f:
            while block := f.read(CHUNK):
                h.update(block)
    return h.hexdigest()


def split_file(path: Path, parts_dir: Path, part_bytes: int) -> list[dict]:
    """Cut `path` into parts_dir/NAME.part001, ... of at most part_bytes each; returns their records."""
    parts_dir.mkdir(parents=True, exist_ok=True)
    records = []
    with open(path, "rb") as f:
        index = 1
        while True:
            part = parts_dir / f"{path.name}.part{index:03d}"
            h, size = hashlib.sha256(), 0
            with open(part, "wb") as out:
                while size < part_bytes:
                    block = f.read(min(CHUNK, part_bytes - size))
                    if not block:
                        break
                    out.write(block)
                    h.update(block)
                    size += len(block)
            if size == 0:
                part.unlink()
                break
            records.append({"name": part.name, "size": size, "sha256": h.hexdigest()})
            index += 1
    return records


def finish(root: Path, extra: str, split_mb: int | None) -> dict:
    """Write root/manifest.json for the wheels in root/wheels, splitting those over split_mb MB."""
    wheels = root / "wheels"
    files = sorted(wheels.glob("*.whl"))
    if not files:
        raise UsageError(f"{wheels} holds no wheels")
    left = sorted(p.name for p in wheels.iterdir() if p.suffix != ".whl")
    if left:
        raise WheelhouseError(f"{wheels} holds files that are not wheels: {', '.join(left)}")
    records, glibc = [], None
    for path in files:
        record = {"name": path.name, "size": path.stat().st_size, "sha256": sha256_of([path])}
        need = glibc_needed(path.name)
        if need and (glibc is None or need > glibc):
            glibc = need
        if split_mb and record["size"] > split_mb * MB:
            record["parts"] = split_file(path, root / "parts", split_mb * MB)
            path.unlink()
        records.append(record)
    here = this_interpreter()
    manifest = {
        "format": FORMAT,
        "python": here["python"],
        "implementation": here["implementation"],
        "platform": here["platform"],
        "glibc_min": f"{glibc[0]}.{glibc[1]}" if glibc else None,
        "extra": extra,
        "split_mb": split_mb,
        "created": time.strftime("%Y-%m-%d %H:%M:%S %z"),
        "total_bytes": sum(r["size"] for r in records),
        "files": records,
    }
    (root / MANIFEST).write_text(json.dumps(manifest, indent=1) + "\n")
    return manifest


def load(root: Path) -> dict:
    path = root / MANIFEST
    if not path.is_file():
        raise UsageError(
            f"{root} is not a wheelhouse (no {MANIFEST}): make one with scripts/wheelhouse.sh build {root}"
        )
    try:
        manifest = json.loads(path.read_text())
    except (OSError, ValueError) as exc:
        raise WheelhouseError(f"{path} is unreadable ({exc}): copy the wheelhouse again") from None
    if not isinstance(manifest, dict) or manifest.get("format") != FORMAT or "files" not in manifest:
        raise UsageError(f"{path} is not a manifest this script writes (format {FORMAT})")
    return manifest


def check(root: Path) -> None:
    """The running interpreter is the Python version, implementation and platform the wheelhouse
    was built for, with a glibc at least as new as its wheels need."""
    m, here = load(root), this_interpreter()
    want = f"{m['implementation']} {m['python']} on {m['platform']}"
    have = f"{here['implementation']} {here['python']} on {here['platform']}"
    if (m["implementation"], m["python"], m["platform"]) != (
        here["implementation"],
        here["python"],
        here["platform"],
    ):
        raise UsageError(
            f"wheelhouse {root} is for {want}, but {sys.executable} is {have}: "
            f"install with a Python {m['python']} (--python PATH), or build a wheelhouse with this one"
        )
    need = m.get("glibc_min")
    if need and here["glibc"]:
        if tuple(map(int, here["glibc"].split(".")[:2])) < tuple(map(int, need.split("."))):
            raise UsageError(
                f"wheelhouse {root} has wheels that need glibc {need} or newer; this machine has {here['glibc']}"
            )


def verify(root: Path, write: bool = False) -> tuple[int, int]:
    """Every wheel of the manifest, whole or in parts, is present with its size and sha256.
    write=True also rebuilds each split wheel into root/wheels (atomically). Returns (files, parts).
    Raises WheelhouseError naming the first missing or corrupt file or part."""
    m = load(root)
    wheels, parts_dir = root / "wheels", root / "parts"
    n_parts = 0
    for record in m["files"]:
        name, parts = record["name"], record.get("parts")
        whole = wheels / name
        if not parts:
            _check_one(whole, record, f"wheels/{name}")
            continue
        n_parts += len(parts)
        if (
            whole.is_file()
            and whole.stat().st_size == record["size"]
            and sha256_of([whole]) == record["sha256"]
        ):
            continue  # reassembled before
        paths, joined = [], hashlib.sha256()
        for i, part in enumerate(parts, 1):
            path = parts_dir / part["name"]
            _check_one(path, part, f"parts/{part['name']} (part {i} of {len(parts)} of {name})", joined)
            paths.append(path)
        if joined.hexdigest() != record["sha256"]:
            raise WheelhouseError(f"{root}: the parts of {name} do not add up to it (sha256 mismatch)")
        if write:
            wheels.mkdir(exist_ok=True)
            tmp = wheels / f".{name}.tmp"
            with open(tmp, "wb") as out:
                for path in paths:
                    with open(path, "rb") as f:
                        while block := f.read(CHUNK):
                            out.write(block)
            os.replace(tmp, whole)
    return len(m["files"]), n_parts


def _check_one(path: Path, record: dict, label: str, joined=None) -> None:
    """path exists with the record's size and sha256; its bytes also go into `joined` if given."""
    if not path.is_file():
        raise WheelhouseError(f"{label} is missing: copy it into the wheelhouse again")
    size = path.stat().st_size
    if size != record["size"]:
        raise WheelhouseError(f"{label} is corrupt ({size} bytes, expected {record['size']}): copy it again")
    h = hashlib.sha256()
    with open(path, "rb") as f:
        while block := f.read(CHUNK):
            h.update(block)
            if joined is not None:
                joined.update(block)
    if h.hexdigest() != record["sha256"]:
        raise WheelhouseError(f"{label} is corrupt (sha256 mismatch): copy it again")


# ------------------------------------------------------------------------------------ CLI
def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python scripts/wheelhouse.py", description=__doc__.split("\n\n")[0])
    sub = p.add_subparsers(dest="cmd", required=True)
    s = sub.add_parser("pins", help="name==version of every package in a pip --report file")
    s.add_argument("report")
    s.add_argument("out")
    s = sub.add_parser("finish", help="write the manifest, splitting wheels over --split-mb")
    s.add_argument("dir")
    s.add_argument("--extra", required=True, choices=("cpu", "gpu"))
    s.add_argument("--split-mb", type=int)
    for name in ("check", "verify", "assemble"):
        sub.add_parser(name).add_argument("dir")
    args = p.parse_args(argv)
    try:
        if args.cmd == "pins":
            try:
                report = json.loads(Path(args.report).read_text())
            except (OSError, ValueError) as exc:
                raise UsageError(f"cannot read pip's report {args.report}: {exc}") from None
            lines = pins(report)
            Path(args.out).write_text("".join(line + "\n" for line in lines))
            print(len(lines))
        elif args.cmd == "finish":
            if args.split_mb is not None and args.split_mb < 1:
                raise UsageError(f"--split-mb must be a positive number of MB, got {args.split_mb}")
            m = finish(Path(args.dir), args.extra, args.split_mb)
            n_parts = sum(len(r.get("parts", [])) for r in m["files"])
            print(f"{len(m['files'])} wheels, {m['total_bytes'] / 1e9:.2f} GB, {n_parts} parts")
        elif args.cmd == "check":
            check(Path(args.dir))
        else:
            files, parts = verify(Path(args.dir), write=args.cmd == "assemble")
            print(f"{files} wheels ({parts} parts) intact")
    except UsageError as exc:
        print(f"wheelhouse: {exc}", file=sys.stderr)
        return 2
    except WheelhouseError as exc:
        print(f"wheelhouse: {exc}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
