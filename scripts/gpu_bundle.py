"""A self-contained bundle that runs this project's trainer (`python -m recipes.train`, verl's real
trainer on Ray) on a bare GPU machine: Python 3.12, a fixed set of preinstalled packages
(scripts/gpu_bundle/preinstalled.txt), no network, and at most 64 MiB of files per command.
Standard library only, so any Python 3.10+ can run it; `pip` (for downloads and the selftest) is
this interpreter's when it has one, else the project's .venv's.

    python scripts/gpu_bundle.py build --out DIR          # write the bundle (DIR absent or empty)
    python scripts/gpu_bundle.py selftest [--keep DIR] [--python PY312] [--check-script FILE]
                                    # build it, then run it in a venv holding only preinstalled.txt
                                    # (FILE: a stand-in for repo/scripts/gpu_bundle/bare_check.py)

Layout of a bundle DIR (at most 60 MiB):
    repo/            the project's files as in the working tree (tracked, modified and untracked but
                     not ignored; without docs/results/ and the images under docs/)
    wheels/*.whl     cp312 manylinux x86_64 (or pure) wheels of what the trainer imports and the
                     machine lacks or has at a version outside our pins (WHEELS below, the .venv's
                     exact versions), downloaded once into ${RECIPES_CACHE:-~/.cache/verl_math_recipes}
                     /gpu_bundle/wheels; antlr4-python3-runtime 4.9.3 is an sdist, built there
    ray.tar.xz       Ray's cp312 wheel without what ray.init, tasks, actors and placement groups do
                     not need (RAY_DROP in scripts/gpu_bundle_parts.py), with its dist-info (RECORD
                     rewritten), xz-packed, executable bits kept
    run.sh           scripts/gpu_bundle/run.sh: installs wheels/ and ray.tar.xz into a private site
                     folder once, then runs repo/scripts/gpu_bundle/bare_check.py with the arguments
    manifest.json    every file's size and sha256, the git commit (and whether the tree was dirty),
                     the python tag, the total size

`selftest` builds a bundle into a temporary folder, makes (once; cached under the same cache folder,
keyed by the list it installs) a Python 3.12 venv holding only packages from preinstalled.txt at
their known versions (SELFTEST_PACKAGES below: the subset the project's closure imports; what pip
pulls in that preinstalled.txt lacks is uninstalled again), and runs
`bash DIR/run.sh --cpu --out TMP/results` with that venv's python as `python3`; it passes when the
output ends with a line starting `done:` and TMP/results/results.json exists.

Exit status: 0 done, 1 a failed step (an over-size bundle names its largest items; a failed
download or check), 2 a usage error (an output folder that is not empty, a wrong interpreter).
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "scripts"))
from gpu_bundle_parts import (  # noqa: E402, F401  (wheel files, Ray's slimming, the repo's files)
    RAY_DROP,
    RAY_DROP_SUFFIXES,
    add_file,
    copy_repo,
    find_wheel,
    git_state,
    keep_ray_path,
    record_line,
    repo_files,
    slim_ray,
    wheel_fits,
)
from wheelhouse import canonical, sha256_of  # noqa: E402  (stdlib only, like this script)

HERE = REPO / "scripts" / "gpu_bundle"
CHECK_SCRIPT = "scripts/gpu_bundle/bare_check.py"  # what run.sh runs, relative to the bundle's repo/
MIB = 1 << 20
LIMIT = 60 * MIB  # the machine takes 64 MiB of files per command; leave room for the check's own
PYTHON_TAG = "cp312"
PLATFORMS = ("manylinux_2_28_x86_64", "manylinux_2_17_x86_64", "manylinux2014_x86_64")

# What the bundle carries as wheels: name -> (version, why). Installed with --no-deps, so every
# import of the closure that the machine cannot satisfy must be listed here. `make setup` installs
# the .venv with these versions as constraints (`pins`); tests/test_gpu_bundle.py checks them.
WHEELS: dict[str, tuple[str, str]] = {
    # the trainer and what `import verl` loads
    "verl": ("0.9.1", "the trainer: verl.trainer.main_ppo (TaskRunnerV1, run_ppo)"),
    "transformers": ("5.9.0", "version pin: machine has 5.17.0, verl 0.9.1 needs >=5.5.3,<5.11"),
    "tokenizers": ("0.22.2", "version pin: machine has 0.23.2, transformers 5.9.0 needs <=0.23.0"),
    "omegaconf": ("2.3.1", "verl.utils.config (`import verl`), recipes.*"),
    "antlr4-python3-runtime": ("4.9.3", "omegaconf, hydra; latex2sympy2_extended (an sdist: built here)"),
    "tensordict": ("0.10.0", "verl.protocol (`import verl`)"),
    "pyvers": ("0.1.0", "tensordict.utils"),
    "orjson": ("3.13.0", "tensordict.utils"),
    "TransferQueue": ("0.1.11", "transfer_queue: verl.utils.transferqueue_utils (`import verl`)"),
    "pyzmq": ("27.3.0", "zmq: transfer_queue.client"),
    "msgspec": ("0.22.0", "transfer_queue.utils.serial_utils"),
    "hydra-core": ("1.3.8", "verl.trainer.main_ppo; recipes.train composes configs/ with it"),
    "codetiming": ("1.4.0", "verl.utils.profiler (verl.workers.config)"),
    "torchdata": ("0.11.0", "verl.trainer.ppo.v1.trainer_base (StatefulDataLoader)"),
    "datasets": ("5.2.0", "verl.utils.dataset.rl_dataset (via recipes.extensions.plugins)"),
    "dill": ("0.4.1", "datasets"),
    "multiprocess": ("0.70.19", "datasets"),
    # verl's agent loop and rollout servers (verl.experimental.agent_loop, recipes.extensions.plugins)
    "pydantic": ("2.14.4", "verl.experimental.agent_loop.agent_loop, verl.tools.schemas"),
    "pydantic_core": ("2.50.5", "pydantic"),
    "annotated-types": ("0.8.0", "pydantic"),
    "typing-inspection": ("0.4.5", "pydantic"),
    "typing_extensions": ("4.16.0", "version pin: machine's version unknown, pydantic 2.14.4 needs >=4.16.0"),
    "fastapi": ("0.136.3", "verl.workers.rollout.utils (via verl.workers.rollout.llm_server)"),
    "starlette": ("1.10.0", "fastapi"),
    "uvicorn": ("0.54.0", "verl.workers.rollout.utils"),
    "cachetools": ("8.0.2", "verl.workers.rollout.router (via verl.workers.rollout.llm_server)"),
    # the grader (rewards.grade, via rewards.training)
    "math-verify": ("0.9.0", "rewards._mathverify"),
    "latex2sympy2_extended": ("1.11.0", "math_verify"),
    "Pebble": ("5.2.3", "rewards.grade: process pool with per-task time limits"),
    # Ray's own imports (Ray itself travels as ray.tar.xz, see gpu_bundle_parts.RAY_DROP)
    "jsonschema": ("4.26.0", "ray._private.runtime_env.plugin_schema_manager (`import ray`)"),
    "jsonschema-specifications": ("2025.9.1", "jsonschema"),
    "referencing": ("0.37.0", "jsonschema"),
    "rpds-py": ("2026.9.1", "rpds: referencing"),
}
BUILT_FROM_SDIST = {"antlr4-python3-runtime"}
RAY_VERSION = "2.60.0"

# The selftest venv: the part of preinstalled.txt that the closure imports (with what pip pulls in;
# anything pulled in that preinstalled.txt lacks is uninstalled again). Versions are the image's
# where known; the others float (the image's version is unknown).
SELFTEST_PACKAGES = (
    "torch==2.11.0",  # PyPI's CUDA 13 build (runs on a CPU); its nvidia-* wheels come along
    "numpy==2.5.2",
    "transformers==5.17.0",
    "tokenizers==0.23.2",
    "huggingface_hub==1.33.0",
    "safetensors==0.8.0",
    "accelerate==1.15.0",
    "sentencepiece==0.2.2",
    "peft",
    "pyyaml",
    "pandas",
    "pyarrow",
    "psutil",
    "requests",
    "aiohttp",
    "grpcio",
    "protobuf",
    "msgpack",
    "filelock",
    "fsspec",
    "jinja2",
    "packaging",
    "sympy",
    "mpmath",
    "click",
    "cloudpickle",
    "xxhash",
    "prometheus-client",
    "uvloop",
    "typing-extensions",
    "regex",
    "tqdm",
    "pillow",
    "rich",
    "typer",
)


class BundleError(Exception):
    """A failed step (exit 1)."""


class UsageError(Exception):
    """A usage error (exit 2)."""


def log(msg: str) -> None:
    print(msg, flush=True)


def mib(n: int) -> str:
    return f"{n / MIB:.1f} MiB"


def cache_dir() -> Path:
    root = os.environ.get("RECIPES_CACHE") or os.path.expanduser("~/.cache/verl_math_recipes")
    return Path(root) / "gpu_bundle"


def pip_python() -> str:
    """An interpreter with pip: this one, else the project's .venv's."""
    for py in (sys.executable, str(REPO / ".venv" / "bin" / "python")):
        if (
            Path(py).exists()
            and subprocess.run([py, "-m", "pip", "--version"], capture_output=True).returncode == 0
        ):
            return py
    raise BundleError("no pip: run this script with a Python that has pip (e.g. .venv/bin/python)")


# ------------------------------------------------------------------------------------- wheels
def fetch_wheels(folder: Path, table: dict[str, tuple[str, str]] = WHEELS) -> list[Path]:
    """The wheels of `table` from `folder`, downloading (or building) the missing ones into it."""
    folder.mkdir(parents=True, exist_ok=True)
    missing = [n for n, (v, _) in table.items() if find_wheel(folder, n, v) is None]
    download = [f"{n}=={table[n][0]}" for n in missing if n not in BUILT_FROM_SDIST]
    if download:
        log(f"downloading {len(download)} wheel(s) into {folder}")
        plat = [a for p in PLATFORMS for a in ("--platform", p)]
        cmd = [pip_python(), "-m", "pip", "download", "-q", "--no-deps", "--only-binary=:all:"]
        cmd += ["--python-version", "3.12", "--implementation", "cp", *plat, "-d", str(folder), *download]
        run_pip(cmd)
    for name in (n for n in missing if n in BUILT_FROM_SDIST):
        log(f"building the wheel of {name}=={table[name][0]} (an sdist) into {folder}")
        cmd = [pip_python(), "-m", "pip", "wheel", "-q", "--no-deps", "-w", str(folder)]
        run_pip([*cmd, f"{name}=={table[name][0]}"])
    out = []
    for name, (version, _) in table.items():
        path = find_wheel(folder, name, version)
        if path is None:
            raise BundleError(f"no cp312 manylinux x86_64 wheel of {name}=={version} in {folder}")
        out.append(path)
    return out


def run_pip(cmd: list[str]) -> None:
    proc = subprocess.run(cmd, capture_output=True, text=True)
    noise = re.compile(r"^WARNING: Location .* is ignored")
    for line in (proc.stdout + proc.stderr).splitlines():
        if line.strip() and not noise.match(line):
            print(f"  pip: {line}", file=sys.stderr)
    if proc.returncode:
        raise BundleError(f"pip failed (exit {proc.returncode}): {' '.join(cmd[2:6])} ...")


# ---------------------------------------------------------------------------------------- ray


def ray_archive(cache: Path) -> Path:
    """The slimmed Ray archive, made once per wheel and drop list and kept in the cache."""
    wheels = cache / "wheels"
    table = {"ray": (RAY_VERSION, "")}
    (wheel,) = fetch_wheels(wheels, table)
    key = hashlib.sha256(repr((wheel.name, RAY_DROP, RAY_DROP_SUFFIXES)).encode()).hexdigest()[:12]
    out = cache / f"ray-{RAY_VERSION}-{PYTHON_TAG}-slim-{key}.tar.xz"
    if not out.exists():
        log(f"slimming {wheel.name} (xz -9, about a minute)")
        tmp = out.with_suffix(".tmp")
        kept, size = slim_ray(wheel, tmp)
        tmp.rename(out)
        log(f"  {kept} files, {mib(size)} unpacked -> {mib(out.stat().st_size)}")
    return out


# ------------------------------------------------------------------------------------- bundle
def check_empty(out: Path) -> None:
    if out.exists() and (not out.is_dir() or any(out.iterdir())):
        raise UsageError(
            f"{out} exists and is not an empty folder: give a new or empty one (nothing was written)"
        )


def folder_size(path: Path) -> int:
    return sum(p.lstat().st_size for p in path.rglob("*") if p.is_file() and not p.is_symlink())


def check_size(items: dict[str, int], limit: int | None = None) -> None:
    """Raises BundleError naming the largest items when their total exceeds `limit` (LIMIT)."""
    limit = LIMIT if limit is None else limit
    total = sum(items.values())
    if total > limit:
        top = sorted(items.items(), key=lambda kv: -kv[1])[:5]
        named = ", ".join(f"{k} {mib(v)}" for k, v in top)
        raise BundleError(f"bundle is {mib(total)}, over the {mib(limit)} limit; largest: {named}")


def write_manifest(out: Path, commit: str, dirty: bool) -> dict:
    files = {}
    for path in sorted(p for p in out.rglob("*") if p.is_file() and not p.is_symlink()):
        rel = path.relative_to(out).as_posix()
        if rel != "manifest.json":
            files[rel] = {"size": path.stat().st_size, "sha256": sha256_of([path])}
    manifest = {
        "format": 1,
        "created": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "git_commit": commit,
        "git_dirty": dirty,
        "python_tag": PYTHON_TAG,
        "platforms": list(PLATFORMS),
        "ray": RAY_VERSION,
        "wheels": {n: v for n, (v, _) in WHEELS.items()},
        "total_bytes": sum(f["size"] for f in files.values()),
        "files": files,
    }
    (out / "manifest.json").write_text(json.dumps(manifest, indent=1, sort_keys=True) + "\n")
    return manifest


def build(out: Path, cache: Path | None = None, check_script: Path | None = None) -> dict:
    """Writes the bundle into `out` (absent or empty); `check_script` replaces (or stands in for)
    repo/scripts/gpu_bundle/bare_check.py."""
    out = out.resolve()
    check_empty(out)
    cache = cache or cache_dir()
    wheels = fetch_wheels(cache / "wheels")
    ray = ray_archive(cache)
    out.mkdir(parents=True, exist_ok=True)
    repo_size = copy_repo(out / "repo")
    if check_script is not None:
        dest = out / "repo" / CHECK_SCRIPT
        dest.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(check_script, dest)
        repo_size = folder_size(out / "repo")
    (out / "wheels").mkdir()
    items = {"repo/": repo_size}
    for whl in wheels:
        shutil.copyfile(whl, out / "wheels" / whl.name)
        items[f"wheels/{whl.name}"] = whl.stat().st_size
    shutil.copyfile(ray, out / "ray.tar.xz")
    items["ray.tar.xz"] = ray.stat().st_size
    shutil.copyfile(HERE / "run.sh", out / "run.sh")
    os.chmod(out / "run.sh", 0o755)
    items["run.sh"] = (out / "run.sh").stat().st_size
    commit, dirty = git_state()
    manifest = write_manifest(out, commit, dirty)
    items["manifest.json"] = (out / "manifest.json").stat().st_size
    wheel_total = sum(v for k, v in items.items() if k.startswith("wheels/"))
    log(f"repo:   {mib(repo_size)} ({sum(1 for f in manifest['files'] if f.startswith('repo/'))} files)")
    log(f"wheels: {mib(wheel_total)} ({len(wheels)} wheels)")
    log(f"ray:    {mib(items['ray.tar.xz'])} (ray {RAY_VERSION}, slimmed, xz)")
    try:
        check_size(items)
    except BundleError as e:
        raise BundleError(f"{e} (what was built is left in {out})") from None
    log(f"bundle: {out} ({sum(items.values()) / MIB:.1f} MiB)")
    return manifest


# ----------------------------------------------------------------------------------- selftest
def preinstalled(path: Path = HERE / "preinstalled.txt") -> dict[str, str | None]:
    """canonical name -> version (None where unknown) of the machine's packages."""
    out: dict[str, str | None] = {}
    for line in path.read_text().splitlines():
        line = line.split("#", 1)[0].strip()
        if line:
            name, _, version = line.partition("==")
            out[canonical(name)] = version or None
    return out


def selftest_venv(python: str, cache: Path) -> Path:
    """A venv of `python` (3.12) with SELFTEST_PACKAGES and nothing outside preinstalled.txt,
    made once and reused (keyed by the package list and the interpreter's version)."""
    known = preinstalled()
    for spec in SELFTEST_PACKAGES:
        name, _, version = spec.partition("==")
        if canonical(name) not in known:
            raise BundleError(f"SELFTEST_PACKAGES has {name}, which preinstalled.txt lacks")
        if version and known[canonical(name)] not in (None, version):
            raise BundleError(
                f"SELFTEST_PACKAGES pins {spec}, preinstalled.txt says {known[canonical(name)]}"
            )
    pyver = subprocess.run([python, "-c", "import sys; print(sys.version)"], capture_output=True, text=True)
    if pyver.returncode or not pyver.stdout.startswith("3.12."):
        raise UsageError(
            f"--python {python} is not a Python 3.12 ({pyver.stdout.strip() or pyver.stderr.strip()})"
        )
    key = hashlib.sha256(repr((SELFTEST_PACKAGES, pyver.stdout.split()[0])).encode()).hexdigest()[:12]
    venv = cache / f"selftest-venv-{key}"
    vpy = venv / "bin" / "python"
    if (venv / ".complete").exists():
        log(f"selftest venv: {venv} (reused)")
        return vpy
    if venv.exists():
        shutil.rmtree(venv)  # ours: an earlier attempt that did not complete
    t0 = time.monotonic()
    log(f"selftest venv: creating {venv} (torch and its nvidia-* wheels: a few minutes)")
    subprocess.run([python, "-m", "venv", str(venv)], check=True)
    run_pip([str(vpy), "-m", "pip", "install", "-q", *SELFTEST_PACKAGES])
    installed = pip_list(vpy)
    extra = sorted(n for n in installed if canonical(n) not in known)
    if extra:
        log(f"  uninstalling what pip pulled in that the machine lacks: {', '.join(extra)}")
        run_pip([str(vpy), "-m", "pip", "uninstall", "-y", "-q", *extra])
    installed = pip_list(vpy)
    (venv / "installed.txt").write_text("".join(f"{n}=={v}\n" for n, v in sorted(installed.items())))
    (venv / ".complete").write_text(f"{time.monotonic() - t0:.0f} s\n")
    log(f"  {len(installed)} packages in {time.monotonic() - t0:.0f} s (list: {venv / 'installed.txt'})")
    return vpy


def find_python312() -> str:
    """The first of python3.12 on PATH, /usr/bin/python3.12 and pyenv's 3.12 builds that runs."""
    pyenv = sorted(Path(os.path.expanduser("~/.pyenv/versions")).glob("3.12*/bin/python3.12"), reverse=True)
    for py in (shutil.which("python3.12"), "/usr/bin/python3.12", *map(str, pyenv)):
        if not py or not os.access(py, os.X_OK):
            continue
        probe = "import sys, venv, ensurepip; sys.exit(sys.version_info[:2] != (3, 12))"
        if subprocess.run([py, "-c", probe], capture_output=True).returncode == 0:
            return py
    raise UsageError("no Python 3.12 found: give one with --python")


def pip_list(python: Path) -> dict[str, str]:
    proc = subprocess.run(
        [str(python), "-m", "pip", "list", "--format=json", "--disable-pip-version-check"],
        capture_output=True,
        text=True,
        check=True,
    )
    return {d["name"]: d["version"] for d in json.loads(proc.stdout)}


def selftest(keep: Path | None, python: str, check_script: Path | None = None) -> bool:
    """Builds the bundle and runs it as the machine would, in the selftest venv; True if it passed."""
    if keep is not None:
        check_empty(keep)
    if check_script is None and not (REPO / CHECK_SCRIPT).is_file():
        raise UsageError(f"{CHECK_SCRIPT} does not exist yet: give a stand-in with --check-script FILE")
    if check_script is not None and not check_script.is_file():
        raise UsageError(f"--check-script {check_script}: no such file")
    cache = cache_dir()
    t0 = time.monotonic()
    vpy = selftest_venv(python, cache)
    tmp = Path(tempfile.mkdtemp(prefix="gpu_bundle_selftest_"))
    try:
        bundle = keep.resolve() if keep else tmp / "bundle"
        build(bundle, cache, check_script)
        t1 = time.monotonic()
        env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV", "PYTHONHOME")}
        env["PATH"] = f"{vpy.parent}{os.pathsep}{env.get('PATH', '/usr/bin:/bin')}"
        env["PYTHON"] = str(vpy)
        env["BUNDLE_SITE"] = str(tmp / "site")
        env["TMPDIR"] = str(tmp)  # Ray's session folder too: a run of ours never meets another's
        results = tmp / "results"
        cmd = ["bash", str(bundle / "run.sh"), "--cpu", "--out", str(results)]
        log(f"$ {' '.join(cmd)}")
        last = ""
        with subprocess.Popen(
            cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True
        ) as proc:
            for line in proc.stdout:
                print(f"  | {line}", end="", flush=True)
                if line.strip():
                    last = line.strip()
        took = f"venv and build {t1 - t0:.0f} s, run {time.monotonic() - t1:.0f} s"
        if proc.returncode:
            why = f"run.sh exited {proc.returncode}"
        elif not last.startswith("done:"):
            why = "its output does not end with a `done:` line"
        elif not (results / "results.json").is_file():
            why = f"no {results / 'results.json'}"
        else:
            log(f"selftest: passed ({took})")
            return True
        log(f"selftest: FAILED: {why} ({took})")
        return False
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


# ---------------------------------------------------------------------------------------- cli
def pins() -> list[str]:
    """WHEELS and Ray as pip constraints. `make setup` installs the .venv with them, so the tests
    run on exactly what the bundle carries, and a new release of an unpinned dependency (msgspec
    0.23.0 broke CI) changes nothing until the table does."""
    return [f"{name}=={version}" for name, (version, _) in WHEELS.items()] + [f"ray=={RAY_VERSION}"]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = parser.add_subparsers(dest="cmd", required=True)
    b = sub.add_parser("build", help="write the bundle into DIR (absent or empty)")
    b.add_argument("--out", required=True, type=Path)
    sub.add_parser(
        "pins", help="print the table's versions as pip constraints (`make setup` installs with them)"
    )
    s = sub.add_parser("selftest", help="build the bundle and run it in a venv of the machine's packages")
    s.add_argument("--keep", type=Path, help="build the bundle here (absent or empty) and keep it")
    s.add_argument("--python", help="a Python 3.12 for the venv (default: the first python3.12 that runs)")
    s.add_argument("--check-script", type=Path, help=f"a stand-in for the repo's {CHECK_SCRIPT}")
    args = parser.parse_args(argv)
    try:
        if args.cmd == "pins":
            print("\n".join(pins()))
            return 0
        if args.cmd == "build":
            build(args.out)
            return 0
        return 0 if selftest(args.keep, args.python or find_python312(), args.check_script) else 1
    except UsageError as e:
        print(f"gpu_bundle: {e}", file=sys.stderr)
        return 2
    except BundleError as e:
        print(f"gpu_bundle: {e}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
