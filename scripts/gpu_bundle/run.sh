#!/usr/bin/env bash
# Runs this project from a bundle of scripts/gpu_bundle.py on a bare machine (Python 3.12, no
# network, nothing installed of ours):
#
#   bash DIR/run.sh [ARGS...]       # ARGS go to DIR/repo/scripts/gpu_bundle/bare_check.py
#
# Environment: PYTHON (default python3) must be a CPython 3.12; BUNDLE_SITE is the private site
# folder the bundle installs into (default: a folder under ${TMPDIR:-/tmp} named after the bundle's
# manifest). The first run installs DIR/wheels/*.whl there (pip --no-index --no-deps), unpacks
# DIR/ray.tar.xz into it and writes a dist-info for this project (its entry points, read from
# DIR/repo/pyproject.toml), then stamps it with the manifest's sha256; later runs of the same
# bundle skip all that. PYTHONPATH becomes SITE:DIR/repo (so the bundle's transformers shadows the
# machine's) and PATH gains SITE/bin. Exit 2, in one line, for a wrong interpreter or bundle.
set -euo pipefail

DIR="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
PY="${PYTHON:-python3}"

ver="$("$PY" -c 'import sys; print("%d.%d" % sys.version_info[:2])' 2>/dev/null)" || ver=""
if [[ "$ver" != "3.12" ]]; then
    echo "run.sh: needs Python 3.12 (the bundle's wheels are cp312), but ${PY} is ${ver:-not runnable}; set PYTHON=" >&2
    exit 2
fi
if [[ ! -f "$DIR/manifest.json" || ! -d "$DIR/wheels" || ! -f "$DIR/ray.tar.xz" ]]; then
    echo "run.sh: $DIR is not a complete bundle (manifest.json, wheels/, ray.tar.xz)" >&2
    exit 2
fi

key="$("$PY" -c 'import hashlib, sys; print(hashlib.sha256(open(sys.argv[1], "rb").read()).hexdigest())' "$DIR/manifest.json")"
SITE="${BUNDLE_SITE:-${TMPDIR:-/tmp}/verl_math_recipes_site_${key:0:12}}"
stamp="$SITE/.gpu_bundle_stamp"

if [[ "$(cat "$stamp" 2>/dev/null || true)" != "$key" ]]; then
    start=$SECONDS
    mkdir -p "$SITE"
    rm -f "$stamp"
    "$PY" -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --disable-pip-version-check \
        --upgrade --target "$SITE" "$DIR"/wheels/*.whl
    "$PY" - "$DIR" "$SITE" <<'EOF'
import sys, tarfile, tomllib
from pathlib import Path

bundle, site = Path(sys.argv[1]), Path(sys.argv[2])
with tarfile.open(bundle / "ray.tar.xz") as tar:
    tar.extractall(site, filter="tar")  # keeps the executable bits of gcs_server and raylet
project = tomllib.loads((bundle / "repo" / "pyproject.toml").read_text())["project"]
name, version = project["name"], project["version"]
info = site / f"{name.replace('-', '_')}-{version}.dist-info"
info.mkdir(exist_ok=True)
(info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n")
lines = []
for group, entries in project.get("entry-points", {}).items():
    lines += [f"[{group}]", *(f"{k} = {v}" for k, v in entries.items()), ""]
(info / "entry_points.txt").write_text("\n".join(lines))
(info / "INSTALLER").write_text("gpu_bundle run.sh\n")
EOF
    echo "$key" > "$stamp"
    echo "run.sh: installed the bundle into $SITE ($((SECONDS - start)) s)" >&2
fi

export PYTHONPATH="$SITE:$DIR/repo${PYTHONPATH:+:$PYTHONPATH}"
export PATH="$SITE/bin:$PATH"
exec "$PY" "$DIR/repo/scripts/gpu_bundle/bare_check.py" "$@"
