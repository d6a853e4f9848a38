#!/bin/bash
# GPU smoke run: every GPU experiment preset, scaled down, on the GPUs of this machine (1 to 8),
# then its last checkpoint converted to HuggingFace and evaluated with vLLM on a few questions.
#
#   scripts/gpu_smoke.sh                       # models and data from the caches every preset reads
#   scripts/gpu_smoke.sh MODELS_DIR DATA_DIR [OUT_DIR]   # the older form: two folders of your own
#   DRY_RUN=1 scripts/gpu_smoke.sh             # print every command, run nothing
#   sbatch scripts/slurm/gpu_smoke.sbatch      # the same as a Slurm job
#
# Presets: every configs/experiment/*.yaml whose platform is not cpu (a new one is picked up by
# itself). Per preset, in OUT_DIR/<preset>/ (train.log, convert.log, eval.log, gpu_memory.csv):
#   1. python -m recipes.train experiment=<preset> platform=gpu trainer.n_gpus_per_node=<GPUs> ...
#      2 steps, ceil(4/GPUs) x GPUs questions x 8 responses (TA-GRPO: 2 per variant when more),
#      responses of at most 256 tokens,
#      validation on 8 questions and a checkpoint at step 2 (scripts/gpu_smoke.py lists them all)
#   2. python -m eval.convert run/checkpoints --steps 2           (verl's merger, to hf/global_step_2)
#   3. python -m eval.run --model hf/global_step_2 --backend vllm  on the first 8 validation questions
# then prints one line: PASS or FAIL, seconds per step, peak GPU memory (nvidia-smi, vLLM included),
# the actor's peak (torch), tokens/s, eval accuracy. At the end: a Markdown table of all presets
# (also in OUT_DIR/table.md). Exit status 0 only when every preset passed.
#
# Inputs: the preset's model where it fits one GPU, else a smaller one of its family
# (scripts/gpu_smoke.py, STAND_INS; docs/slurm.md), and the preset's data. Without folders, read where
# every preset's Slurm job reads them (docs/slurm.md#offline-clusters):
#   models      by hub id from the Hugging Face cache, $HF_HOME/hub (HF_HOME default ~/.cache/huggingface)
#   data        $RECIPES_CACHE/data/<dataset>/{train,test}.parquet (RECIPES_CACHE default
#               ~/.cache/verl_math_recipes), as `python -m recipes.tools.data prepare NAME` writes them
# `python scripts/gpu_smoke.py downloads` prints what the caches lack (run it where there is internet,
# with the jobs' HF_HOME and RECIPES_CACHE). The older form names two folders instead:
#   MODELS_DIR  one folder per model, named after its hub repository (Qwen2.5-Math-1.5B, Qwen3-1.7B,
#               DeepSeek-R1-Distill-Qwen-1.5B, ...); `python scripts/gpu_smoke.py downloads MODELS_DIR
#               DATA_DIR` prints the commands that fill both
#   DATA_DIR    DATA_DIR/<dataset>/{train,test}.parquet: what $RECIPES_CACHE/data is to the presets
#   OUT_DIR     default outputs/gpu_smoke/<date-time> (also the OUT_DIR environment variable)
# Hub access: a preset whose model and data are all here runs with HF_HUB_OFFLINE=1 (a hub id counts
# when its whole snapshot is cached), and HF_DATASETS_OFFLINE=1 always (the data are local files). A
# hub model missing from the cache is downloaded when this node reaches the Hub, said in one line;
# otherwise the preset is reported as SKIP with the command that fetches it beforehand, as is a
# preset whose data or MODELS_DIR folder is missing. The other presets still run. An HF_HUB_OFFLINE
# you set yourself is kept.
#
# Environment variables:
#   GPUS_PER_NODE   GPUs to use, 1-8 (default: CUDA_VISIBLE_DEVICES's count, else nvidia-smi's;
#                   GPUS: its old name)
#   PRESETS         comma-separated subset of the presets (default: all GPU presets)
#   PYTHON          interpreter with this project installed (default: python)
#   ATTN            auto (default: flash-attn if importable, else sdpa), flash or sdpa
#   PRESET_TIMEOUT  seconds allowed for each of training and evaluation (default 1800)
#   HF_HOME, RECIPES_CACHE  the caches above
#   RECIPES_SKIP_DRIVER_CHECK  1: do not compare the driver's version with torch's CUDA (for nodes that
#                   run a newer CUDA through NVIDIA's forward-compatibility libraries; one line says so)
#   DRY_RUN         1: print the commands as "[dry-run] ..." lines and run nothing
#
# Status: its checks, plan, SKIP path and table ran on an H100 (2026-11-27) with no weights there;
# no preset has trained on a GPU yet (docs/slurm.md).
set -euo pipefail

REPO=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
SLURM_LAUNCHER_NAME=gpu_smoke
# shellcheck source=scripts/slurm/common.sh
source "$REPO/scripts/slurm/common.sh"

if [[ ${1-} == -h || ${1-} == --help ]]; then
    sed -n '2,/^set -euo/p' "${BASH_SOURCE[0]}" | sed -e '$d' -e 's/^# \{0,1\}//'
    exit 0
fi
parse_dry_run
(($# == 0 || $# == 2 || $# == 3)) ||
    die "usage: scripts/gpu_smoke.sh, or scripts/gpu_smoke.sh MODELS_DIR DATA_DIR [OUT_DIR] (--help for more)"
_abs=() # the folders as absolute paths
for _arg in "$@"; do
    [[ $_arg == /* ]] || _arg=$PWD/$_arg
    _abs+=("$_arg")
done
set -- ${_abs[@]+"${_abs[@]}"}
MODELS_DIR=${1-}
DATA_DIR=${2-}
OUT_DIR=${3:-${OUT_DIR:-outputs/gpu_smoke/$(date +%Y%m%d-%H%M%S)}}
# the caches, as train.sbatch sets them: the same hub cache and data folder for every preset
export HF_HOME=${HF_HOME:-$HOME/.cache/huggingface}
if [[ -z $MODELS_DIR ]]; then
    note "models from the Hugging Face cache (HF_HOME=$HF_HOME), data from" \
        "${RECIPES_CACHE:-$HOME/.cache/verl_math_recipes}/data (RECIPES_CACHE), as every preset's Slurm job reads them"
fi
[[ $OUT_DIR == /* ]] || OUT_DIR=$PWD/$OUT_DIR
PYTHON=${PYTHON:-python}
ATTN=${ATTN:-auto}
PRESET_TIMEOUT=${PRESET_TIMEOUT:-1800}
require_posint PRESET_TIMEOUT
[[ $ATTN =~ ^(auto|flash|sdpa)$ ]] || die "ATTN must be auto, flash or sdpa, got '$ATTN'"
if ! is_dry_run && [[ -n $MODELS_DIR ]]; then
    [[ -d $MODELS_DIR ]] || die "MODELS_DIR '$MODELS_DIR' is not a folder"
    [[ -d $DATA_DIR ]] || die "DATA_DIR '$DATA_DIR' is not a folder"
fi
command -v "$PYTHON" >/dev/null 2>&1 || die "PYTHON=$PYTHON not found on PATH (activate the environment)"

# ---- how many GPUs ----
if [[ -n ${GPUS:-} && -z ${GPUS_PER_NODE:-} ]]; then
    note "GPUS is now GPUS_PER_NODE (as in train.sbatch); the old name goes in the next release"
    GPUS_PER_NODE=$GPUS
fi
if [[ -n ${GPUS_PER_NODE:-} ]]; then
    require_posint GPUS_PER_NODE
elif [[ -n ${CUDA_VISIBLE_DEVICES:-} ]]; then
    IFS=, read -ra _visible <<<"$CUDA_VISIBLE_DEVICES"
    GPUS_PER_NODE=${#_visible[@]}
elif command -v nvidia-smi >/dev/null 2>&1; then
    GPUS_PER_NODE=$(nvidia-smi -L 2>/dev/null | grep -c '^GPU ' || true)
    ((GPUS_PER_NODE > 0)) || die "nvidia-smi lists no GPU; set GPUS_PER_NODE=N to override"
elif is_dry_run; then
    GPUS_PER_NODE=1
    note "no nvidia-smi here: GPUS_PER_NODE=1 for the dry run (set GPUS_PER_NODE=N to see another count)"
else
    die "no GPU found (no nvidia-smi, CUDA_VISIBLE_DEVICES unset); set GPUS_PER_NODE=N to override"
fi
if ! is_dry_run; then # the driver against torch's CUDA (R580+ for CUDA 13), in one line
    # (RECIPES_SKIP_DRIVER_CHECK=1 skips the comparison, for CUDA forward compatibility, and says so)
    PYTHONPATH=$REPO${PYTHONPATH:+:$PYTHONPATH} "$PYTHON" -m recipes.platforms.gpu driver || exit 2
fi
# one GPU's memory, for recipes.plan's estimate beside the measured peak
GPU_GIB=""
if ! is_dry_run && command -v nvidia-smi >/dev/null 2>&1; then
    _mib=$(nvidia-smi --query-gpu=memory.total --format=csv,noheader,nounits 2>/dev/null | head -1 || true)
    [[ ! $_mib =~ ^[0-9]+$ ]] || GPU_GIB=$(awk -v m="$_mib" 'BEGIN { printf "%.1f", m / 1024 }')
fi
if ((GPUS_PER_NODE > 8)); then
    note "$GPUS_PER_NODE GPUs visible; the smoke run uses 8 (one node)"
    GPUS_PER_NODE=8
fi

# The data are local files; the Hub is set offline per preset below, when all it reads is here (an
# HF_HUB_OFFLINE of your own is kept: then a model missing from the cache skips its preset).
export HF_DATASETS_OFFLINE=${HF_DATASETS_OFFLINE:-1} PYTHONUNBUFFERED=1
USER_HUB_OFFLINE=${HF_HUB_OFFLINE-}
SMOKE_PY=$REPO/scripts/gpu_smoke.py
_folders=()
[[ -z $MODELS_DIR ]] || _folders=(--models-dir "$MODELS_DIR" --data-dir "$DATA_DIR")
plan=$(PYTHONPATH=$REPO${PYTHONPATH:+:$PYTHONPATH} "$PYTHON" "$SMOKE_PY" plan ${_folders[@]+"${_folders[@]}"} \
    --out-dir "$OUT_DIR" --gpus "$GPUS_PER_NODE" --attn "$ATTN" --presets "${PRESETS:-}") || exit $?
RESULTS=$OUT_DIR/results.jsonl
run mkdir -p "$OUT_DIR"
is_dry_run || : >"$RESULTS"
note "$(grep -c . <<<"$plan") presets on $GPUS_PER_NODE GPU(s); results in $OUT_DIR"

# run_logged LOG CMD...: run CMD with its output into LOG; sets RC (never stops the script).
run_logged() {
    local logfile=$1
    shift
    if is_dry_run; then
        printf '[dry-run] %s > %s 2>&1\n' "$(quote_cmd "$@")" "$(quote_cmd "$logfile")"
        RC=0
        return 0
    fi
    log "+ $(quote_cmd "$@") > $logfile"
    RC=0
    "$@" >"$logfile" 2>&1 || RC=$?
}

sampler_pid=""
stop_sampler() {
    if [[ -n $sampler_pid ]]; then
        kill "$sampler_pid" 2>/dev/null || true
        wait "$sampler_pid" 2>/dev/null || true
        sampler_pid=""
    fi
}
trap stop_sampler EXIT

while IFS=$'\x1f' read -r -a fields; do
    preset=${fields[0]}
    problem=${fields[1]}
    hub=${fields[2]} # recipes.offline's line: offline: ... (all here) or online: ... (downloads)
    val_file=${fields[3]}
    overrides=("${fields[@]:4}")
    dir=$OUT_DIR/$preset
    result=("$PYTHON" "$SMOKE_PY" result --preset "$preset" --run-dir "$dir/run" --results "$RESULTS")
    [[ -z $GPU_GIB ]] || result+=(--gpu-gib "$GPU_GIB")
    if [[ -n $problem ]]; then
        if ! is_dry_run; then
            log "$preset: SKIP: $problem"
            "${result[@]}" --skip "$problem" >/dev/null
            continue
        fi
        note "$preset: $problem (a real run skips this preset)"
    fi
    if [[ -z $USER_HUB_OFFLINE ]]; then
        if [[ $hub == offline:* ]]; then
            export HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1
        else
            unset HF_HUB_OFFLINE TRANSFORMERS_OFFLINE
        fi
    fi
    [[ -z $hub ]] || note "$preset: $hub"
    run mkdir -p "$dir"
    if is_dry_run || command -v nvidia-smi >/dev/null 2>&1; then
        run_bg nvidia-smi --query-gpu=index,memory.used --format=csv,noheader,nounits -lms 1000 \
            -f "$dir/gpu_memory.csv"
        sampler_pid=$RUN_BG_PID
    fi
    run_logged "$dir/train.log" timeout --signal=TERM --kill-after=60 "$PRESET_TIMEOUT" \
        "$PYTHON" -m recipes.train "${overrides[@]}"
    train_rc=$RC
    convert_rc=-
    eval_rc=-
    if ((train_rc == 0)); then
        run_logged "$dir/convert.log" "$PYTHON" -m eval.convert "$dir/run/checkpoints" --steps 2 \
            --hf-root "$dir/hf"
        convert_rc=$RC
    fi
    if [[ $convert_rc == 0 ]]; then
        run_logged "$dir/questions.log" "$PYTHON" "$SMOKE_PY" questions "$val_file" "$dir/questions/smoke.jsonl"
        eval_rc=$RC
    fi
    if [[ $eval_rc == 0 ]]; then
        run_logged "$dir/eval.log" timeout --signal=TERM --kill-after=60 "$PRESET_TIMEOUT" \
            "$PYTHON" -m eval.run --model "$dir/hf/global_step_2" --out "$dir/eval" --backend vllm \
            --data-dir "$dir/questions" --benchmarks smoke --repeats 1 --max-new-tokens 256 \
            --max-model-len 4096 --tensor-parallel-size 1 --gpu-memory-utilization 0.5 --no-progress
        eval_rc=$RC
    fi
    if is_dry_run; then
        note "stop the GPU memory sampler"
    fi
    stop_sampler
    run "${result[@]}" --train-rc "$train_rc" --convert-rc "$convert_rc" --eval-rc "$eval_rc" \
        --eval-dir "$dir/eval" --gpu-log "$dir/gpu_memory.csv"
done <<<"$plan"

if is_dry_run; then
    run "$PYTHON" "$SMOKE_PY" table "$RESULTS"
    exit 0
fi
status=0
"$PYTHON" "$SMOKE_PY" table "$RESULTS" | tee "$OUT_DIR/table.md" || status=$?
log "table in $OUT_DIR/table.md; logs per preset in $OUT_DIR/<preset>/"
exit "$status"
