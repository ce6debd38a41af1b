#!/usr/bin/env bash
# 1 vs 2 Ray Serve replicas of the embedded SmolLM2 against plain `flexserv run`,
# with `flexserv bench`, on this machine (loopback only, bounded run).
# Usage: benchmarks/ray_replicas.sh [OUT_DIR]   (from the repository root, venv built)
set -euo pipefail
OUT=${1:-bench-ray}
BIN=${BIN:-.venv/bin}
PORT=${PORT:-18771}
CONC=${CONC:-1,8}
REQS=${REQS:-24}
TOKENS=${TOKENS:-32}
export HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 FLEXSERV_DISABLE_PLUGIN_AUTOLOAD=1
mkdir -p "$OUT"

wait_ready() {  # $1 = pid of the server
  for _ in $(seq 1 240); do
    if curl -sf "http://127.0.0.1:$PORT/v1/flexserv/health" >/dev/null; then return 0; fi
    kill -0 "$1" 2>/dev/null || return 1
    sleep 1
  done
  return 1
}

run_one() {  # $1 = label, rest = server command
  local label=$1; shift
  "$@" >"$OUT/$label.server.log" 2>&1 &
  local pid=$!
  if wait_ready "$pid"; then
    "$BIN/flexserv" bench --url "http://127.0.0.1:$PORT" --concurrency "$CONC" --requests "$REQS" \
      --max-tokens "$TOKENS" --warmup 2 --quiet --json >"$OUT/$label.json" || true
  fi
  kill -TERM "$pid"; wait "$pid" || true
}

COMMON=(-p transformers --port "$PORT" --transformers-max-batch-size 8)
run_one direct "$BIN/flexserv" run "${COMMON[@]}"
run_one ray1 "$BIN/flexserv" ray-serve -p ray "${COMMON[@]}" --ray-replicas 1 --ray-num-cpus 1 --ray-local-cpus 2
run_one ray2 "$BIN/flexserv" ray-serve -p ray "${COMMON[@]}" --ray-replicas 2 --ray-num-cpus 1 --ray-local-cpus 2
echo "results in $OUT/"
