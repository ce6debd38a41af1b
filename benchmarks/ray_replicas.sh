#!/usr/bin/env bash
# Proxy overhead of Ray Serve: plain `flexserv run` against `flexserv ray-serve` with 1
# and with 2 replicas of the embedded SmolLM2, loaded by `flexserv bench` on loopback.
#
# The plain server stays up for the whole run and is measured interleaved with each Ray
# configuration (plain, ray, plain, ray, ...), so both see the same machine load.
# Bounded: short runs, a time limit per bench run, per server start and for the whole
# script. It stops only what it started: each server runs in its own session (setsid)
# and is stopped by its PID (SIGTERM: ray-serve drains and stops the local Ray cluster
# it started, in its own RAY_TMPDIR); anything of that session still alive afterwards
# is killed by PID. It never runs `ray stop`, which would stop every Ray on the machine.
#
# Usage (repository root, venv built):  benchmarks/ray_replicas.sh [OUT_DIR]
# Knobs: CONC=1,4 REQS=12 TOKENS=32 ROUNDS=2 BENCH_TIMEOUT=240 START_TIMEOUT=300 DEADLINE=1500
# IDLE=20 (seconds the idle Ray processes' CPU is measured, subtracted from the per-token CPU)
set -uo pipefail
OUT=${1:-bench-ray}
BIN=${BIN:-.venv/bin}
CONC=${CONC:-1,4}
REQS=${REQS:-12}
TOKENS=${TOKENS:-32}
ROUNDS=${ROUNDS:-2}
BENCH_TIMEOUT=${BENCH_TIMEOUT:-240}
START_TIMEOUT=${START_TIMEOUT:-300}
DEADLINE=${DEADLINE:-1500}
BATCH=${BATCH:-8}
IDLE=${IDLE:-20}
export HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 FLEXSERV_DISABLE_PLUGIN_AUTOLOAD=1
mkdir -p "$OUT"
RAY_TMPDIR=$(mktemp -d)  # this script's Ray cluster files, apart from any other Ray on the machine
export RAY_TMPDIR
SERVERS=()
T0=$SECONDS

log() { echo "[$(date -u +%H:%M:%S) load $(cut -d' ' -f1-3 /proc/loadavg)] $*" | tee -a "$OUT/run.log" >&2; }

free_port() { "$BIN/python" -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'; }

stop_server() {  # $1 = pid (= its session id: started with setsid)
  local pid=$1
  if kill -0 "$pid" 2>/dev/null; then
    kill -TERM "$pid" 2>/dev/null
    for _ in $(seq 1 90); do kill -0 "$pid" 2>/dev/null || break; sleep 1; done
  fi
  local left
  left=$(ps -o pid= -s "$pid" 2>/dev/null | tr -d ' ' || true)
  if [ -n "$left" ]; then
    log "killing what is left of session $pid: $(echo "$left" | tr '\n' ' ')"
    for p in $left; do kill -KILL "$p" 2>/dev/null; done
  fi
  wait "$pid" 2>/dev/null || true
}

cleanup() {
  trap - EXIT INT TERM
  for pid in "${SERVERS[@]}"; do stop_server "$pid"; done
  # the watchdog's sleep first (its child), then the watchdog
  [ -n "${WATCHDOG:-}" ] && kill $(ps -o pid= --ppid "$WATCHDOG") "$WATCHDOG" 2>/dev/null
  rm -rf "$RAY_TMPDIR"
}
trap cleanup EXIT
trap 'log "stopped (signal or DEADLINE=${DEADLINE}s)"; exit 130' INT TERM
(sleep "$DEADLINE"; kill -TERM $$ 2>/dev/null) &
WATCHDOG=$!

start_server() {  # $1 = label, $2 = port, rest = command; sets STARTED_PID
  local label=$1 port=$2; shift 2
  setsid "$@" >"$OUT/$label.server.log" 2>&1 &
  STARTED_PID=$!
  SERVERS+=("$STARTED_PID")
  local deadline=$((SECONDS + START_TIMEOUT))
  while [ $SECONDS -lt $deadline ]; do
    curl -sf "http://127.0.0.1:$port/v1/flexserv/health" >/dev/null && { log "$label ready on :$port"; return 0; }
    kill -0 "$STARTED_PID" 2>/dev/null || { log "$label exited during start-up (see $label.server.log)"; return 1; }
    sleep 1
  done
  log "$label not ready after ${START_TIMEOUT}s"
  return 1
}

descendants() {  # $1 = pid: it and all its descendants
  echo "$1"
  for child in $(ps -o pid= --ppid "$1"); do descendants "$child"; done
}

cpu_ticks() {  # $1 = server pid, $2 = process title prefix: CPU (utime+stime, clock ticks) of those processes
  local total=0 p
  for p in $(descendants "$1"); do
    if tr '\0' ' ' </proc/"$p"/cmdline 2>/dev/null | grep -q "^$2"; then
      total=$((total + $(awk '{print $14 + $15}' /proc/"$p"/stat 2>/dev/null || echo 0)))
    fi
  done
  echo "$total"
}

bench() {  # $1 = label, $2 = port, $3 = server pid for the Ray runs (CPU of the proxy and replicas)
  local label=$1 port=$2 server=${3:-}
  log "bench $label"
  local proxy0 replica0
  [ -n "$server" ] && { proxy0=$(cpu_ticks "$server" "ray::ProxyActor"); replica0=$(cpu_ticks "$server" "ray::ServeReplica"); }
  local t0=$SECONDS
  FLEXSERV_PLUGINS=bench timeout "$BENCH_TIMEOUT" "$BIN/flexserv" bench --url "http://127.0.0.1:$port" --concurrency "$CONC" \
    --requests "$REQS" --max-tokens "$TOKENS" --warmup 2 --timeout 120 --quiet --json >"$OUT/$label.json" &
  wait $! || log "bench $label failed or timed out (exit $?)"
  echo "$label $(cut -d' ' -f1-3 /proc/loadavg)" >>"$OUT/loadavg.txt"
  if [ -n "$server" ]; then
    echo "$label proxy_cpu_s=$(( $(cpu_ticks "$server" "ray::ProxyActor") - proxy0 ))/$(getconf CLK_TCK)" \
      "replicas_cpu_s=$(( $(cpu_ticks "$server" "ray::ServeReplica") - replica0 ))/$(getconf CLK_TCK)" \
      "wall_s=$((SECONDS - t0))/1" >>"$OUT/cpu.txt"
  fi
}

idle_cpu() {  # $1 = label, $2 = server pid: CPU of the idle proxy and replicas over IDLE seconds
  local proxy0 replica0
  proxy0=$(cpu_ticks "$2" "ray::ProxyActor"); replica0=$(cpu_ticks "$2" "ray::ServeReplica")
  sleep "$IDLE"
  echo "$1-idle proxy_cpu_s=$(( $(cpu_ticks "$2" "ray::ProxyActor") - proxy0 ))/$(getconf CLK_TCK)" \
    "replicas_cpu_s=$(( $(cpu_ticks "$2" "ray::ServeReplica") - replica0 ))/$(getconf CLK_TCK)" \
    "wall_s=$IDLE/1" >>"$OUT/cpu.txt"
}

COMMON=(-p transformers --transformers-max-batch-size "$BATCH")
PLAIN_PORT=$(free_port)
log "start: CONC=$CONC REQS=$REQS TOKENS=$TOKENS ROUNDS=$ROUNDS"
start_server plain "$PLAIN_PORT" "$BIN/flexserv" run "${COMMON[@]}" --port "$PLAIN_PORT" || exit 1
PLAIN_PID=$STARTED_PID

# ray1 gets both cores (as plain does: torch's threads follow Ray's num_cpus), so
# plain vs ray1 is the proxy alone; ray2 splits the same two cores over two replicas.
for config in "ray1 1 2" "ray2 2 1"; do
  read -r label replicas cpus <<<"$config"
  port=$(free_port)
  if start_server "$label" "$port" "$BIN/flexserv" ray-serve -p ray "${COMMON[@]}" --port "$port" \
    --ray-replicas "$replicas" --ray-num-cpus "$cpus" --ray-local-cpus 2; then
    log "$label processes: $(for p in $(descendants "$STARTED_PID"); do tr '\0' ' ' </proc/"$p"/cmdline 2>/dev/null | cut -c1-36; echo; done | grep '^ray::' | sort | uniq -c | tr -s ' \n' ' ')"
    idle_cpu "$label" "$STARTED_PID"
    for round in $(seq 1 "$ROUNDS"); do
      bench "plain-$label-r$round" "$PLAIN_PORT"
      bench "$label-r$round" "$port" "$STARTED_PID"
    done
  fi
  stop_server "$STARTED_PID"
  SERVERS=("$PLAIN_PID")
done
log "done in $((SECONDS - T0)) s"
"$BIN/python" benchmarks/ray_replicas_report.py "$OUT" | tee "$OUT/table.md"
