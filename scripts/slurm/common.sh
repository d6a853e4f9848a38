# shellcheck shell=bash
# Helpers shared by the Slurm launch scripts in scripts/slurm/ (sourced, never executed).
#
# Every command a launcher runs goes through run/run_bg, so DRY_RUN=1 prints the exact command
# line (shell-quoted with printf %q, one per line, prefixed "[dry-run] ") instead of running it.
# Log lines go to stderr, prefixed "[<script> HH:MM:SS]". Nothing here reads Slurm state by
# itself; the launcher decides what to fall back to outside Slurm.

SLURM_LAUNCHER_NAME=${SLURM_LAUNCHER_NAME:-slurm}

log() {
    printf '[%s %(%H:%M:%S)T] %s\n' "$SLURM_LAUNCHER_NAME" -1 "$*" >&2
}

die() {
    printf '[%s] ERROR: %s\n' "$SLURM_LAUNCHER_NAME" "$*" >&2
    exit 2
}

# is_dry_run: true when DRY_RUN is 1 (validated by parse_dry_run).
is_dry_run() {
    [[ ${DRY_RUN:-0} == 1 ]]
}

# parse_dry_run: accept DRY_RUN unset/0/1 (also true/false/yes/no), normalise to 0/1.
parse_dry_run() {
    case ${DRY_RUN:-0} in
        1 | true | yes) DRY_RUN=1 ;;
        0 | false | no | "") DRY_RUN=0 ;;
        *) die "DRY_RUN must be 0 or 1, got '${DRY_RUN}'" ;;
    esac
}

# quote_cmd ARGS...: the command as one shell-quoted line (what you could paste into bash):
# safe words as they are, anything else in single quotes (the rule of Python's shlex.quote).
quote_cmd() {
    local out="" arg q="'"
    for arg in "$@"; do
        if [[ -n $arg && $arg =~ ^[A-Za-z0-9_@%+=:,./-]+$ ]]; then
            out+="$arg "
        else
            out+="'${arg//$q/$q\\$q$q}' "
        fi
    done
    printf '%s' "${out% }"
}

# run ARGS...: run a command in the foreground, or print it under DRY_RUN=1.
run() {
    if is_dry_run; then
        printf '[dry-run] %s\n' "$(quote_cmd "$@")"
        return 0
    fi
    log "+ $(quote_cmd "$@")"
    "$@"
}

# run_bg ARGS...: start a command in the background and set RUN_BG_PID to its pid (empty under
# DRY_RUN=1, where the command is printed with a trailing " &").
run_bg() {
    RUN_BG_PID=""
    if is_dry_run; then
        printf '[dry-run] %s &\n' "$(quote_cmd "$@")"
        return 0
    fi
    log "+ $(quote_cmd "$@") &"
    "$@" &
    # shellcheck disable=SC2034 # read by the caller
    RUN_BG_PID=$!
}

# note TEXT: a step that is not a single command (a wait, a check); printed under DRY_RUN=1.
note() {
    if is_dry_run; then
        printf '[dry-run] # %s\n' "$*"
    else
        log "$*"
    fi
}

# require_posint NAME: die unless the variable NAME holds a positive decimal integer.
require_posint() {
    local name=$1 value=${!1-}
    if ! [[ $value =~ ^[0-9]+$ ]] || ((10#$value == 0)); then
        die "$name must be a positive integer, got '${value}'"
    fi
}

# require_number NAME: die unless the variable NAME holds a non-negative number (e.g. 0.5, 5).
require_number() {
    local name=$1 value=${!1-}
    [[ $value =~ ^[0-9]+(\.[0-9]+)?$ ]] ||
        die "$name must be a non-negative number of seconds, got '${value}'"
}

# expand_nodelist LIST: print one host per line for a Slurm hostlist expression, e.g.
# "gpu[01-03,07],login1" -> gpu01 gpu02 gpu03 gpu07 login1. Uses `scontrol show hostnames`
# when it answers; otherwise a pure-bash expander (ranges keep their zero padding, several
# bracket groups per name are allowed).
expand_nodelist() {
    local list=$1 out
    # (scontrol needs a reachable Slurm configuration; without one, the expander below)
    if command -v scontrol >/dev/null 2>&1 && out=$(scontrol show hostnames "$list" 2>/dev/null); then
        printf '%s\n' "$out"
        return
    fi
    local depth=0 cur="" ch i
    for ((i = 0; i < ${#list}; i++)); do
        ch=${list:i:1}
        case $ch in
            "[") depth=$((depth + 1)) ;;
            "]") depth=$((depth - 1)) ;;
        esac
        if [[ $ch == "," && $depth == 0 ]]; then
            [[ -n $cur ]] && _expand_host "$cur"
            cur=""
        else
            cur+=$ch
        fi
    done
    [[ -z $cur ]] || _expand_host "$cur"
}

_expand_host() {
    local host=$1
    if [[ $host != *"["* ]]; then
        printf '%s\n' "$host"
        return
    fi
    local prefix=${host%%"["*} rest=${host#*"["}
    local ranges=${rest%%"]"*} suffix=${rest#*"]"}
    local part lo hi n
    local -a parts
    IFS=, read -ra parts <<<"$ranges"
    for part in "${parts[@]}"; do
        if [[ $part =~ ^([0-9]+)-([0-9]+)$ ]]; then
            lo=${BASH_REMATCH[1]}
            hi=${BASH_REMATCH[2]}
            for ((n = 10#$lo; n <= 10#$hi; n++)); do
                _expand_host "$prefix$(printf '%0*d' "${#lo}" "$n")$suffix"
            done
        else
            _expand_host "$prefix$part$suffix"
        fi
    done
}

# resolve_ipv4 HOST: the host's first IPv4 address; else the address Slurm reaches the node at
# (its NodeAddr, e.g. 127.0.0.1 on scripts/slurm/local_cluster.sh's nodes); else HOST itself.
resolve_ipv4() {
    local host=$1 ip=""
    if command -v getent >/dev/null 2>&1; then
        ip=$(getent ahostsv4 "$host" 2>/dev/null | awk 'NR == 1 { print $1 }') || ip=""
    fi
    if [[ -z $ip ]] && command -v scontrol >/dev/null 2>&1; then
        ip=$(scontrol show node "$host" -o 2>/dev/null | grep -o 'NodeAddr=[^ ]*' | cut -d= -f2) || ip=""
    fi
    printf '%s\n' "${ip:-$host}"
}

# wait_pid_for PID SECONDS: wait until PID exits or SECONDS pass; true if it exited.
wait_pid_for() {
    local pid=$1 deadline=$((SECONDS + $2))
    while kill -0 "$pid" 2>/dev/null; do
        ((SECONDS < deadline)) || return 1
        sleep 0.2
    done
    wait "$pid" 2>/dev/null
    return 0
}

# stop_pids SECONDS PID...: SIGTERM to each (in the order given), wait up to SECONDS for all of
# them together, then SIGKILL whatever is left. Always returns 0.
stop_pids() {
    local grace=$1 pid
    shift
    for pid in "$@"; do
        kill -TERM "$pid" 2>/dev/null
    done
    local deadline=$((SECONDS + grace))
    for pid in "$@"; do
        wait_pid_for "$pid" $((deadline > SECONDS ? deadline - SECONDS : 0)) && continue
        log "pid $pid still alive ${grace}s after SIGTERM, sending SIGKILL"
        kill -KILL "$pid" 2>/dev/null
        wait "$pid" 2>/dev/null
    done
    return 0
}
