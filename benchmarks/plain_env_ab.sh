#!/usr/bin/env bash
# Interleaved A/B of `flexserv run -p transformers` variants that differ in ONE factor
# (an environment variable, a niceness, a flag), loaded by `flexserv bench` on loopback.
#
# Every variant's server is started first (each in its own session, setsid), then the
# variants are benched in turn, the order rotated each round, so all see the same load.
# An already running server (a Ray Serve proxy, say) joins with a `url=` spec.
#
# Usage (repository root, venv built):
#   benchmarks/plain_env_ab.sh OUT_DIR ROUNDS 'LABEL|PREFIX|FLAGS' ...
#     PREFIX: words put before the server command by `env`, e.g. `OMP_NUM_THREADS=1`
#             or `nice -n 15`; FLAGS: extra `flexserv run` flags, e.g. `--log-level warning`
#     'LABEL|url=http://127.0.0.1:PORT|': bench a server this script did not start
#   e.g. benchmarks/plain_env_ab.sh ab 3 'base||' 'omp1|OMP_NUM_THREADS=1|' 'active|OMP_WAIT_POLICY=ACTIVE|'
# Knobs: CONC=1 REQS=8 TOKENS=32 BENCH_TIMEOUT=200 START_TIMEOUT=240
# Prints one line per bench run (also OUT_DIR/summary.txt); the JSON reports stay in OUT_DIR.
# It stops only the servers it started, by PID (then what is left of their sessions).
set -uo pipefail
OUT=$1 ROUNDS=$2
shift 2
BIN=${BIN:-.venv/bin}
export HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1
mkdir -p "$OUT"
PIDS=() LABELS=() URLS=()

cleanup() {
  local pid left
  for pid in "${PIDS[@]}"; do kill -TERM "$pid" 2>/dev/null; done
  sleep 3
  for pid in "${PIDS[@]}"; do
    left=$(ps -o pid= -s "$pid" 2>/dev/null || true)
    for p in $left; do kill -KILL "$p" 2>/dev/null; done
  done
}
trap cleanup EXIT

free_port() { "$BIN/python" -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'; }

for spec in "$@"; do
  IFS='|' read -r label prefix flags <<<"$spec"
  if [[ "$prefix" == url=* ]]; then
    LABELS+=("$label") URLS+=("${prefix#url=}")
    continue
  fi
  port=$(free_port)
  # shellcheck disable=SC2086  # PREFIX and FLAGS are word lists on purpose
  env FLEXSERV_DISABLE_PLUGIN_AUTOLOAD=1 $prefix setsid "$BIN/flexserv" run -p transformers \
    --transformers-max-batch-size 8 --port "$port" $flags >"$OUT/$label.server.log" 2>&1 &
  PIDS+=("$!") LABELS+=("$label") URLS+=("http://127.0.0.1:$port")
  for _ in $(seq 1 "${START_TIMEOUT:-240}"); do
    curl -sf "http://127.0.0.1:$port/v1/flexserv/health" >/dev/null && break
    sleep 1
  done
  echo "$label: pid ${PIDS[-1]}, port $port" >&2
done

n=${#LABELS[@]}
for round in $(seq 1 "$ROUNDS"); do
  for k in $(seq 0 $((n - 1))); do
    i=$(((k + round) % n))
    report="$OUT/${LABELS[$i]}-r$round.json"
    FLEXSERV_PLUGINS=bench timeout "${BENCH_TIMEOUT:-200}" "$BIN/flexserv" bench --url "${URLS[$i]}" \
      --concurrency "${CONC:-1}" --requests "${REQS:-8}" --max-tokens "${TOKENS:-32}" --warmup 2 \
      --timeout 120 --quiet --json >"$report" 2>/dev/null || echo "${LABELS[$i]} r$round: bench failed" >&2
    "$BIN/python" - "$report" "${LABELS[$i]}" "$round" <<'PY' | tee -a "$OUT/summary.txt"
import json
import sys

path, label, rnd = sys.argv[1:]
try:
    level = json.load(open(path))["levels"][0]
except (OSError, ValueError, KeyError, IndexError):
    sys.exit(0)
ms = lambda v: "-" if v is None else f"{v * 1000:.0f}"  # noqa: E731
load = open("/proc/loadavg").read().split()[0]
print(
    f"{label:10s} r{rnd} load={load} ok={level['completed']}/{level['requests']}"
    f" tok/s={level['output_tokens_per_s']:.1f} ttft50={ms(level['ttft_s']['p50'])}"
    f" itl50={ms(level['itl_s']['p50'])} itl95={ms(level['itl_s']['p95'])} e2e50={ms(level['e2e_s']['p50'])}"
)
PY
  done
done
