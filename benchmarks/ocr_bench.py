"""OCR pages per second: through the server at 1 and 8 clients against the engine in-process.

The same pages (rendered here: A4 at 150 dpi, ~30 lines each, in four fonts)
are read three ways, interleaved so a busy machine hurts them alike:

- ``in-process``: ``RapidOCR`` (FlexServ's tuning) called on the decoded pages
  in a loop, one thread: the engine's own rate, no HTTP, no JSON, no batching;
- ``server c=1`` / ``server c=8``: ``flexserv run -p ocr`` (only that plugin),
  ``POST /v1/ocr`` with one PNG page per request from 1 or 8 clients.

It also reports the first request's cost (a fresh server's first page, the
lazy model load included, against a warm page) and, with ``--tuning``,
RapidOCR's defaults against FlexServ's detection tuning on the same pages
(time and whether the text is the same)::

    python benchmarks/ocr_bench.py --pages 8 --rounds 3
    python benchmarks/ocr_bench.py --tuning
    python benchmarks/ocr_bench.py --overhead --pages 1 --lines 8

``--overhead`` measures the server's own cost per page with the engine replaced by
a no-op, which the machine's load cannot hide behind the engine's time.
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import io
import os
import statistics
import subprocess
import sys
import time
from typing import Any

import httpx
from flexserv_ocr.rapid import lines_from_output, make_engine, rapidocr_params
from flexserv_ocr.testing import FONTS, cer, installed_fonts, png_bytes, render_lines
from PIL import Image

from flexserv_core.testing import wait_healthy

WORDS = [
    "invoice",
    "total",
    "due",
    "date",
    "reference",
    "quantity",
    "amount",
    "customer",
    "account",
    "number",
    "payment",
]


def page_text(seed: int, lines: int = 30) -> list[str]:
    return [
        f"{WORDS[(seed + i) % len(WORDS)].title()} {1000 + seed * 37 + i * 11} "
        f"{WORDS[(seed * 3 + i) % len(WORDS)]} {WORDS[(i * 7 + seed) % len(WORDS)]} {i * 3.25:.2f}"
        for i in range(lines)
    ]


def make_pages(count: int, lines_per_page: int = 30) -> list[tuple[bytes, str]]:
    """``count`` A4 pages at 150 dpi (1240 x 1754), PNG bytes and their text."""
    fonts = installed_fonts() or list(FONTS[:1])
    pages = []
    for i in range(count):
        lines = page_text(i, lines_per_page)
        drawn = render_lines(lines, font=fonts[i % len(fonts)], size=22, spacing=2.0, margin=90)
        page = Image.new("RGB", (1240, 1754), "white")
        page.paste(drawn, (0, 0))
        pages.append((png_bytes(page), "\n".join(lines)))
    return pages


def in_process(engine: Any, pages: list[tuple[bytes, str]]) -> tuple[float, list[str]]:
    """Pages per second of the engine alone (PNG decode included, as the server does it)."""
    import numpy as np

    texts = []
    start = time.perf_counter()
    for data, _ in pages:
        image = Image.open(io.BytesIO(data)).convert("RGB")
        lines = lines_from_output(engine(np.ascontiguousarray(np.asarray(image)[:, :, ::-1])))
        texts.append("\n".join(line.text for line in lines))
    return len(pages) / (time.perf_counter() - start), texts


async def through_server(
    url: str, pages: list[tuple[bytes, str]], clients: int, repeat: int, timings: list[tuple[float, float]]
) -> tuple[float, int]:
    """Pages per second and failed requests; appends each request's ``(latency, engine
    seconds)`` to ``timings`` (the engine's share is the response's ``usage.ocr_seconds``)."""
    bodies = [{"model": "rapidocr", "images": [base64.b64encode(data).decode()]} for data, _ in pages] * repeat
    queue = iter(bodies)
    errors = 0

    async def client(http: httpx.AsyncClient) -> None:
        nonlocal errors
        for body in queue:
            sent = time.perf_counter()
            response = await http.post("/v1/ocr", json=body)
            errors += response.status_code != 200
            if response.status_code == 200:
                timings.append((time.perf_counter() - sent, response.json()["usage"]["ocr_seconds"]))

    async with httpx.AsyncClient(base_url=url, timeout=600) as http:
        start = time.perf_counter()
        await asyncio.gather(*(client(http) for _ in range(clients)))
        return len(bodies) / (time.perf_counter() - start), errors


def start_server(port: int) -> subprocess.Popen[str]:
    env = {**os.environ, "FLEXSERV_DISABLE_PLUGIN_AUTOLOAD": "1", "HF_HUB_OFFLINE": "1"}
    # the default --ocr-timeout: it counts a request's own OCR time, not its wait behind
    # the other clients' pages, so queueing at 8 clients does not fail requests
    command = [sys.executable, "-m", "flexserv_core", "run", "-p", "ocr", "--host", "127.0.0.1", "--port", str(port)]
    return subprocess.Popen(command, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.STDOUT, text=True)


def first_request(url: str, page: bytes) -> tuple[float, float]:
    body = {"images": [base64.b64encode(page).decode()]}
    t0 = time.perf_counter()
    httpx.post(f"{url}/v1/ocr", json=body, timeout=600).raise_for_status()
    first = time.perf_counter() - t0
    t0 = time.perf_counter()
    httpx.post(f"{url}/v1/ocr", json=body, timeout=600).raise_for_status()
    return first, time.perf_counter() - t0


def overhead(pages: list[tuple[bytes, str]], requests: int = 60) -> None:
    """The server's own cost per page: the app served on a socket in this process
    with the engine replaced by one that reads nothing, one client, one page a
    request. What is left is HTTP, JSON, base64, the PNG decode (which the
    in-process loop pays too), the micro-batcher's wait and the thread hand-offs."""
    from flexserv_core.testing import ServedApp, make_app

    body = {"images": [base64.b64encode(pages[0][0]).decode()]}
    app = make_app(["ocr"])
    with ServedApp(app) as url, httpx.Client(base_url=url, timeout=600) as http:
        http.post("/v1/ocr", json=body).raise_for_status()  # loads the model
        model = app.state.flexserv.registry.model_if_loaded("rapidocr")
        model.read_page = lambda image, languages: []
        latencies = []
        for _ in range(requests):
            start = time.perf_counter()
            http.post("/v1/ocr", json=body).raise_for_status()
            latencies.append(time.perf_counter() - start)
    image = pages[0][0]
    decode = []
    for _ in range(requests // 2):
        start = time.perf_counter()
        Image.open(io.BytesIO(image)).convert("RGB")
        decode.append(time.perf_counter() - start)
    print(
        f"server with a no-op engine, 1 client: {statistics.median(latencies) * 1000:.1f} ms a page (median of "
        f"{requests}); of it the PNG decode the in-process loop also pays: {statistics.median(decode) * 1000:.1f} ms"
    )


def tuning(pages: list[tuple[bytes, str]]) -> None:
    defaults, tuned = make_engine(None), make_engine(rapidocr_params(960))
    for engine in (defaults, tuned):
        in_process(engine, pages[:1])  # warm-up
    results: dict[str, list[float]] = {"defaults": [], "tuned": []}
    texts: dict[str, list[str]] = {}
    for _ in range(2):
        for name, engine in (("defaults", defaults), ("tuned", tuned)):
            rate, texts[name] = in_process(engine, pages)
            results[name].append(rate)
    print("| RapidOCR detection | s/page (best of 2) | mean CER |")
    print("|---|---|---|")
    for name in ("defaults", "tuned"):
        mean_cer = statistics.mean(cer(truth, got) for (_, truth), got in zip(pages, texts[name], strict=True))
        print(f"| {name} | {1 / max(results[name]):.2f} | {mean_cer:.4f} |")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--pages", type=int, default=8)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--repeat", type=int, default=1, help="each round sends every page this many times")
    parser.add_argument("--lines", type=int, default=30, help="text lines per page")
    parser.add_argument("--port", type=int, default=8731)
    parser.add_argument("--tuning", action="store_true", help="RapidOCR's defaults against FlexServ's tuning")
    parser.add_argument("--overhead", action="store_true", help="the server's own cost per page (a no-op engine)")
    args = parser.parse_args()
    pages = make_pages(args.pages, args.lines)
    if args.tuning:
        tuning(pages)
        return
    if args.overhead:
        overhead(pages)
        return
    url = f"http://127.0.0.1:{args.port}"
    proc = start_server(args.port)
    try:
        wait_healthy(url, proc)
        first, warm = first_request(url, pages[0][0])
        print(f"first request (lazy load included): {first:.2f} s; the same page warm: {warm:.2f} s")
        engine = make_engine(rapidocr_params(960))
        in_process(engine, pages[:1])
        rates: dict[str, list[float]] = {"in-process": [], "server c=1": [], "server c=8": []}
        single: list[tuple[float, float]] = []
        for _ in range(args.rounds):
            rates["in-process"].append(in_process(engine, pages * args.repeat)[0])
            for clients in (1, 8):
                timings: list[tuple[float, float]] = []
                rate, errors = asyncio.run(through_server(url, pages, clients, args.repeat, timings))
                assert errors == 0, f"{errors} requests failed"
                rates[f"server c={clients}"].append(rate)
                if clients == 1:
                    single += timings
        base = statistics.median(rates["in-process"])
        print("| run | pages/s (median) | all rounds | vs in-process |")
        print("|---|---|---|---|")
        for name, values in rates.items():
            median = statistics.median(values)
            print(f"| {name} | {median:.2f} | {', '.join(f'{v:.2f}' for v in values)} | {median / base:.2f}x |")
        # What the server adds to a page, measured within each request (so the machine's
        # load, which moves the engine's time from round to round, cancels out)
        around = statistics.median(latency - engine for latency, engine in single)
        engine_s = statistics.median(engine for _, engine in single)
        print(
            f"c=1, per request (median of {len(single)}): engine {engine_s * 1000:.0f} ms, server around it "
            f"{around * 1000:.0f} ms (HTTP, JSON, base64, PNG decode, hand-offs): "
            f"{engine_s / (engine_s + around):.3f}x of the engine's own rate"
        )
    finally:
        proc.terminate()
        proc.wait(30)


if __name__ == "__main__":
    main()
