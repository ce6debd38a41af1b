"""Anomaly detection: fit and score rows/s through the server vs scikit-learn in-process.

One ``flexserv run`` (built-ins, the anomaly plugin and the state plugin with its
in-memory store, a throwaway cache directory) and, in this process, the same
scikit-learn estimator (or numpy MAD) with the same parameters on the same rows
(seeded blobs, 16 features, 2% outliers). Per detector, the median of ``--repeat`` runs of: fitting ``--rows``
rows (the server's time is the client's wall time of ``POST /v1/anomaly/fit``
from sending the body, JSON-encoded beforehand, to receiving the answer:
parsing, scaling, the fit in the worker process, the score statistics, encoding
and storing) and scoring them (``POST /v1/anomaly/score`` once the model is
loaded, the answer's objects built and sent). Memory: the server's resident
memory after the last repetition's fits and scores (one model per encoding)
minus before (noisy: allocator pools), what one fitted model holds (its pickled
size, in this process) and its stored size.

``--encoding`` picks how the rows travel: ``json`` (rows as lists of numbers),
``npy`` (``"data": {"npy": "<base64 .npy>"}``), ``npy-body`` (the body is the .npy
file itself, ``Content-Type: application/x-npy``, the other fields in the
``X-FlexServ-Arguments`` header), ``both`` (the default: JSON and NPY), ``all``
(the three) or a comma-separated list (``npy,npy-body``); each repetition runs in-process, then each encoding in turn, so that
load drifting over the run hurts them all alike::

    python benchmarks/anomaly_bench.py --rows 10000 --repeat 5
"""

from __future__ import annotations

import argparse
import base64
import io
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
    """Fit and score seconds of the scikit-learn estimator (or the numpy MAD) the server uses,
    called as a user would: ``fit`` and ``score_samples`` (not the server's own fit and
    scoring paths, which for the isolation forest skip scikit-learn's per-tree bookkeeping
    and joblib's per-tree dispatch)."""
    from flexserv_anomaly import detectors

    info = detectors.lookup(backend)
    detector = detectors.build(info.name, detectors.check_params(info, {}), 0.02)
    estimator = getattr(detector, "estimator", None)
    fit, score = (
        (estimator.fit, estimator.score_samples) if estimator is not None else (detector.fit, detector.raw_scores)
    )
    started = time.perf_counter()
    fit(x)
    fitted = time.perf_counter()
    score(x)
    return fitted - started, time.perf_counter() - fitted


def robust_scaled(x: np.ndarray) -> np.ndarray:
    """``x`` scaled as the server scales a fit's rows by default (``scaler_type`` robust)."""
    from flexserv_anomaly import fitted

    center, scale = fitted._scaler(x, "robust")
    return np.asarray((x - center) / scale)


def model_mb(backend: str, x: np.ndarray) -> float:
    """What one fitted model holds (scaler, training rows, the fitted estimator), as its pickled size."""
    import pickle

    from flexserv_anomaly import detectors, fitted

    info = detectors.lookup(backend)
    spec = fitted.FitSpec(backend=info.name, params=detectors.check_params(info, {}), contamination=0.02)
    return len(pickle.dumps(fitted.fit(spec, x))) / 2**20


def npy_file(x: np.ndarray) -> bytes:
    """``x`` as an .npy file (float64, C order)."""
    buffer = io.BytesIO()
    np.save(buffer, np.ascontiguousarray(x, dtype=np.float64), allow_pickle=False)
    return buffer.getvalue()


def npy_data(x: np.ndarray) -> dict[str, str]:
    """The NPY encoding of ``x`` for a request's ``data``."""
    return {"npy": base64.b64encode(npy_file(x)).decode("ascii")}


def request(encoding: str, fields: dict[str, Any], payloads: dict[str, Any]) -> tuple[str | bytes, dict[str, str]]:
    """The body and headers of a request with ``fields`` and the rows in ``encoding``."""
    if encoding == "npy-body":
        return payloads[encoding], {"Content-Type": "application/x-npy", "X-FlexServ-Arguments": json.dumps(fields)}
    return json.dumps({**fields, "data": payloads[encoding]}), JSON


def timed_post(client: httpx.Client, path: str, body: str | bytes, headers: dict[str, str]) -> float:
    started = time.perf_counter()
    client.post(path, content=body, headers=headers).raise_for_status()
    return time.perf_counter() - started


def rss_mb(pid: int) -> float:
    return float(psutil.Process(pid).memory_info().rss) / 2**20


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rows", type=int, default=10_000)
    parser.add_argument("--features", type=int, default=16)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--detectors", default=",".join(DETECTORS))
    parser.add_argument(
        "--encoding", default="both", help="json, npy, npy-body, both (json,npy), all, or a comma-separated list"
    )
    parser.add_argument(
        "--server-arg",
        action="append",
        default=[],
        help="an extra option for the server, e.g. --server-arg=--anomaly-score-threads=1 (repeatable)",
    )
    parser.add_argument(
        "--scaled-baseline",
        action="store_true",
        help="also fit in-process on the rows robust-scaled as the server fits them (the scaler's own time"
        " left out): the server's overhead on the same problem, where scaling changes the library's work",
    )
    args = parser.parse_args()
    x = data(args.rows, args.features)
    x_scaled = robust_scaled(x) if args.scaled_baseline else None
    encodings = {"both": ["json", "npy"], "all": ["json", "npy", "npy-body"]}.get(
        args.encoding, args.encoding.split(",")
    )
    if unknown := set(encodings) - {"json", "npy", "npy-body"}:
        parser.error(f"unknown encoding(s): {', '.join(sorted(unknown))}")
    payloads: dict[str, Any] = {"json": x.tolist(), "npy": npy_data(x), "npy-body": npy_file(x)}
    rows = payloads["json"]
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    cache = tempfile.mkdtemp(prefix="anomaly-bench-")
    # The state plugin without a store plugin: models are stored in memory (memory://), so the
    # figures leave out a database write (the default sqlite store adds one per fit).
    env = {**os.environ, "FLEXSERV_PLUGINS": "anomaly,state", "HF_HUB_OFFLINE": "1"}
    command = [sys.executable, "-m", "flexserv_core", "run", "--host", "127.0.0.1", "--port", str(port)]
    command += ["--cache-dir", cache, "--anomaly-fit-timeout", "3600", *args.server_arg]
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
                local_fit, local_score, scaled_fit = [], [], []
                served_fit: dict[str, list[float]] = {e: [] for e in encodings}
                served_score: dict[str, list[float]] = {e: [] for e in encodings}
                for i in range(args.repeat):
                    f, s = in_process(backend, x)
                    local_fit.append(f)
                    if x_scaled is not None:
                        scaled_fit.append(in_process(backend, x_scaled)[0])
                    local_score.append(s)
                    before = rss_mb(proc.pid)
                    for encoding in encodings:
                        name = f"{backend}-{encoding}-{i}"
                        # The client's encoding is its own work, done once: outside the timed part.
                        fit_body = request(
                            encoding, {"model": name, "backend": backend, "contamination": 0.02}, payloads
                        )
                        score_body = request(encoding, {"model": name}, payloads)
                        served_fit[encoding].append(timed_post(client, "/v1/anomaly/fit", *fit_body))
                        # Load the model (lazily, from the state store) before timing the score.
                        client.post("/v1/anomaly/score", json={"model": name, "data": rows[:2]}).raise_for_status()
                        served_score[encoding].append(timed_post(client, "/v1/anomaly/score", *score_body))
                    grown = rss_mb(proc.pid) - before
                size = next(
                    m["size_bytes"] for m in client.get("/v1/anomaly/models").json()["data"] if m["backend"] == backend
                )
                fit_local, score_local = statistics.median(local_fit), statistics.median(local_score)
                row: dict[str, Any] = {
                    "detector": backend,
                    "rows": args.rows,
                    "fit_rows_s_sklearn": args.rows / fit_local,
                    "score_rows_s_sklearn": args.rows / score_local,
                }
                if scaled_fit:
                    row["fit_rows_s_sklearn_scaled_rows"] = args.rows / statistics.median(scaled_fit)
                for encoding in encodings:
                    fit_served = statistics.median(served_fit[encoding])
                    if scaled_fit:
                        row[f"fit_ratio_scaled_rows_{encoding}"] = statistics.median(scaled_fit) / fit_served
                    score_served = statistics.median(served_score[encoding])
                    row[f"fit_rows_s_server_{encoding}"] = args.rows / fit_served
                    row[f"fit_ratio_{encoding}"] = fit_local / fit_served
                    row[f"score_rows_s_server_{encoding}"] = args.rows / score_served
                    row[f"score_ratio_{encoding}"] = score_local / score_served
                row |= {
                    "rss_growth_mb_last_models": grown,
                    "stored_mb": size / 2**20,
                    "model_mb": model_mb(backend, x),
                }
                results.append(row)
                print(json.dumps({k: round(v, 3) if isinstance(v, float) else v for k, v in row.items()}), flush=True)
    finally:
        stop(proc)
    served = [f"fit rows/s server {e} | ratio" for e in encodings]
    scored = [f"score rows/s server {e} | ratio" for e in encodings]
    head = ["detector", "fit rows/s sklearn", *served, "score rows/s sklearn", *scored, "model MB", "stored MB"]
    print("\n| " + " | ".join(head) + " |")
    print("|" + " --- |" * (len(head) + 2 * len(encodings)))
    for r in results:
        cells = [r["detector"], f"{r['fit_rows_s_sklearn']:,.0f}"]
        cells += [f"{r[f'fit_rows_s_server_{e}']:,.0f} | {r[f'fit_ratio_{e}']:.2f}" for e in encodings]
        cells.append(f"{r['score_rows_s_sklearn']:,.0f}")
        cells += [f"{r[f'score_rows_s_server_{e}']:,.0f} | {r[f'score_ratio_{e}']:.2f}" for e in encodings]
        cells += [f"{r['model_mb']:.2f}", f"{r['stored_mb']:.2f}"]
        print("| " + " | ".join(cells) + " |")


if __name__ == "__main__":
    main()
