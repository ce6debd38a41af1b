"""Anomaly detection: fit and score rows/s through the server vs scikit-learn in-process.

One ``flexserv run`` (built-ins and the anomaly plugin only, a throwaway cache
directory) and, in this process, the same scikit-learn estimator (or numpy MAD)
with the same parameters on the same rows (seeded blobs, 16 features, 2%
outliers). Per detector, the median of ``--repeat`` runs of: fitting ``--rows``
rows (the server's time is the client's wall time of ``POST /v1/anomaly/fit``
from sending the body, JSON-encoded beforehand, to receiving the answer:
parsing, scaling, the fit in the worker process, the score statistics, encoding
and storing) and scoring them (``POST /v1/anomaly/score`` once the model is
loaded, the answer's objects built and sent). Memory: the server's resident
memory after the last repetition's fit and score minus before (noisy: allocator
pools), what one fitted model holds (its pickled size, in this process) and its
stored size::

    python benchmarks/anomaly_bench.py --rows 10000 --repeat 5
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import httpx
import numpy as np
import psutil

sys.path.insert(0, str(Path(__file__).resolve().parent))
from compare_peers import free_port, stop

JSON = {"Content-Type": "application/json"}
DETECTORS = ["isolation_forest", "local_outlier_factor", "one_class_svm", "robust_zscore"]


def data(rows: int, features: int, seed: int = 0) -> np.ndarray:
    rng = np.random.default_rng(seed)
    centers = rng.uniform(-8, 8, size=(4, features))
    normal = centers[rng.integers(0, 4, rows)] + rng.normal(size=(rows, features))
    k = rows // 50
    normal[:k] = rng.uniform(-15, 15, size=(k, features))
    return normal


def in_process(backend: str, x: np.ndarray) -> tuple[float, float]:
    """Fit and score seconds of the scikit-learn estimator (or the numpy MAD) the server uses."""
    from flexserv_anomaly import detectors

    info = detectors.lookup(backend)
    detector = detectors.build(info.name, detectors.check_params(info, {}), 0.02)
    started = time.perf_counter()
    detector.fit(x)
    fitted = time.perf_counter()
    detector.raw_scores(x)
    return fitted - started, time.perf_counter() - fitted


def model_mb(backend: str, x: np.ndarray) -> float:
    """What one fitted model holds (scaler, training rows, the fitted estimator), as its pickled size."""
    import pickle

    from flexserv_anomaly import detectors, fitted

    info = detectors.lookup(backend)
    spec = fitted.FitSpec(backend=info.name, params=detectors.check_params(info, {}), contamination=0.02)
    return len(pickle.dumps(fitted.fit(spec, x))) / 2**20


def rss_mb(pid: int) -> float:
    return float(psutil.Process(pid).memory_info().rss) / 2**20


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rows", type=int, default=10_000)
    parser.add_argument("--features", type=int, default=16)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--detectors", default=",".join(DETECTORS))
    args = parser.parse_args()
    x = data(args.rows, args.features)
    rows = x.tolist()
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    cache = tempfile.mkdtemp(prefix="anomaly-bench-")
    env = {**os.environ, "FLEXSERV_PLUGINS": "anomaly", "HF_HUB_OFFLINE": "1"}
    command = [sys.executable, "-m", "flexserv_core", "run", "--host", "127.0.0.1", "--port", str(port)]
    command += ["--cache-dir", cache, "--anomaly-fit-timeout", "3600"]
    proc = subprocess.Popen(
        command, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, text=True, start_new_session=True
    )
    results: list[dict[str, Any]] = []
    try:
        with httpx.Client(base_url=url, timeout=3600) as client:
            deadline = time.monotonic() + 120
            while True:
                try:
                    if client.get("/health").status_code == 200:
                        break
                except httpx.HTTPError:
                    pass
                if time.monotonic() > deadline:
                    raise SystemExit("the server did not start")
                time.sleep(0.2)
            client.post("/v1/anomaly/fit", json={"model": "warm", "data": rows[:100]}).raise_for_status()
            for backend in args.detectors.split(","):
                local_fit, local_score, served_fit, served_score = [], [], [], []
                for i in range(args.repeat):
                    f, s = in_process(backend, x)
                    local_fit.append(f)
                    local_score.append(s)
                    before = rss_mb(proc.pid)
                    # The client's JSON encoding is its own work, done once: outside the timed part.
                    fit_body = json.dumps(
                        {"model": f"{backend}-{i}", "backend": backend, "data": rows, "contamination": 0.02}
                    )
                    score_body = json.dumps({"model": f"{backend}-{i}", "data": rows})
                    started = time.perf_counter()
                    client.post("/v1/anomaly/fit", content=fit_body, headers=JSON).raise_for_status()
                    served_fit.append(time.perf_counter() - started)
                    # Load the model (lazily, from the state store) before timing the score.
                    warm = {"model": f"{backend}-{i}", "data": rows[:2]}
                    client.post("/v1/anomaly/score", json=warm).raise_for_status()
                    started = time.perf_counter()
                    client.post("/v1/anomaly/score", content=score_body, headers=JSON).raise_for_status()
                    served_score.append(time.perf_counter() - started)
                    grown = rss_mb(proc.pid) - before
                size = next(
                    m["size_bytes"] for m in client.get("/v1/anomaly/models").json()["data"] if m["backend"] == backend
                )
                fit_local, fit_served = statistics.median(local_fit), statistics.median(served_fit)
                score_local, score_served = statistics.median(local_score), statistics.median(served_score)
                row = {
                    "detector": backend,
                    "rows": args.rows,
                    "fit_rows_s_sklearn": args.rows / fit_local,
                    "fit_rows_s_server": args.rows / fit_served,
                    "fit_ratio": fit_local / fit_served,
                    "score_rows_s_sklearn": args.rows / score_local,
                    "score_rows_s_server": args.rows / score_served,
                    "score_ratio": score_local / score_served,
                    "rss_growth_mb_last_model": grown,
                    "stored_mb": size / 2**20,
                    "model_mb": model_mb(backend, x),
                }
                results.append(row)
                print(json.dumps({k: round(v, 3) if isinstance(v, float) else v for k, v in row.items()}), flush=True)
    finally:
        stop(proc)
    print(
        "\n| detector | fit rows/s sklearn | fit rows/s server | ratio | score rows/s sklearn | score rows/s server | ratio | RSS growth MB | model MB | stored MB |"
    )
    print("| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |")
    for r in results:
        print(
            f"| {r['detector']} | {r['fit_rows_s_sklearn']:,.0f} | {r['fit_rows_s_server']:,.0f} | {r['fit_ratio']:.2f} | "
            f"{r['score_rows_s_sklearn']:,.0f} | {r['score_rows_s_server']:,.0f} | {r['score_ratio']:.2f} | "
            f"{r['rss_growth_mb_last_model']:.1f} | {r['model_mb']:.2f} | {r['stored_mb']:.2f} |"
        )


if __name__ == "__main__":
    main()
