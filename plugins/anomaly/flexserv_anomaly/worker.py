"""Fits run in worker processes, so that one can be stopped.

A scikit-learn fit cannot be interrupted inside a thread. Each fit is sent to a
warm worker process (scikit-learn already imported) over a pipe; when the
client disconnects or the fit passes its time budget the worker is killed and
a new one takes its place, so a runaway fit costs nothing after it is stopped.
The worker sends back the fitted model (over our own pipe, from our own child:
not a file anyone else wrote) and its encoded ``(header, blob)``.
"""

from __future__ import annotations

import asyncio
import logging
import multiprocessing.connection
import socket
import subprocess
import sys
import time
from dataclasses import dataclass
from typing import Any

import numpy as np

from flexserv_anomaly.fitted import FitSpec, FittedModel

log = logging.getLogger(__name__)
#: Seconds a new worker may take to start and import scikit-learn.
STARTUP_TIMEOUT = 120.0


@dataclass
class FitOutcome:
    model: FittedModel
    header: dict[str, Any]
    blob: bytes


class FitFailed(Exception):
    """The fit raised; ``param``/``code`` say whether it was the request's fault."""

    def __init__(self, message: str, *, param: str | None, code: str, client_error: bool) -> None:
        super().__init__(message)
        self.param = param
        self.code = code
        self.client_error = client_error


class FitTimedOut(Exception):
    pass


def fit_and_encode(spec: FitSpec, x: np.ndarray, name: str) -> FitOutcome:
    from flexserv_anomaly import codec, fitted

    model = fitted.fit(spec, x)
    header, blob = codec.encode(model, name)
    return FitOutcome(model, header, blob)


def _serve(conn: multiprocessing.connection.Connection) -> None:
    import sklearn.ensemble  # noqa: F401  (warm: no fit's time budget pays the import)

    from flexserv_anomaly import detectors

    conn.send(("ready", None))
    while True:
        try:
            spec, x, name = conn.recv()
        except (EOFError, OSError):
            return
        try:
            result: tuple[str, Any] = ("ok", fit_and_encode(spec, x, name))
        except detectors.DetectorError as exc:
            result = ("invalid", (str(exc), exc.param, exc.code))
        except ValueError as exc:  # scikit-learn's word on parameters that do not fit these rows
            result = ("invalid", (str(exc), "parameters", "invalid_fit"))
        except MemoryError:
            result = ("error", "the fit ran out of memory")
        except Exception as exc:
            result = ("error", f"{type(exc).__name__}: {exc}")
        conn.send(result)


class _Worker:
    """``python -m flexserv_anomaly.worker FD``: a fresh interpreter (not a fork of the
    server, and without re-running the server's main module as multiprocessing's
    spawn would) talking over one end of a socket pair."""

    def __init__(self) -> None:
        ours, theirs = socket.socketpair()
        with theirs:
            self.process = subprocess.Popen(
                [sys.executable, "-m", "flexserv_anomaly.worker", str(theirs.fileno())],
                pass_fds=(theirs.fileno(),),
                stdin=subprocess.DEVNULL,
            )
        self.conn = multiprocessing.connection.Connection(ours.detach())
        try:
            if not self.conn.poll(STARTUP_TIMEOUT):
                raise TimeoutError(f"no fit worker was ready within {STARTUP_TIMEOUT:g} s")
            self.conn.recv()
        except BaseException:
            self.kill()
            raise

    def call(self, job: tuple[FitSpec, np.ndarray, str]) -> tuple[str, Any]:
        self.conn.send(job)
        reply: tuple[str, Any] = self.conn.recv()
        return reply

    def kill(self) -> None:
        self.process.kill()
        self.process.wait(timeout=10)
        self.conn.close()

    def alive(self) -> bool:
        return self.process.poll() is None


class FitPool:
    """At most ``size`` fits at once, each in its own worker process."""

    def __init__(self, size: int) -> None:
        self._slots = asyncio.Semaphore(size)
        self._idle: list[_Worker] = []
        self.killed = 0

    async def fit(self, spec: FitSpec, x: np.ndarray, name: str, *, budget: float) -> FitOutcome:
        """Fit in a worker; cancelling the awaiting task (a disconnect) or passing
        ``budget`` seconds kills the worker. Raises :class:`FitFailed` or :class:`FitTimedOut`."""
        async with self._slots:
            worker = self._idle.pop() if self._idle else await self._start()
            started = time.monotonic()
            keep = False
            try:
                status, payload = await asyncio.wait_for(asyncio.to_thread(worker.call, (spec, x, name)), budget)
                keep = True
            except TimeoutError:
                raise FitTimedOut(f"the fit did not finish within {budget:g} s") from None
            except (EOFError, OSError):
                raise FitFailed(
                    "the fit's worker process died (out of memory?)", param=None, code="fit_failed", client_error=False
                ) from None
            finally:
                if keep and worker.alive():
                    self._idle.append(worker)
                else:
                    self.killed += 1
                    log.info("stopping a fit after %.1f s: its worker is killed", time.monotonic() - started)
                    await asyncio.to_thread(worker.kill)
        if status == "ok":
            outcome: FitOutcome = payload
            return outcome
        if status == "invalid":
            message, param, code = payload
            raise FitFailed(message, param=param, code=code, client_error=True)
        raise FitFailed(str(payload), param=None, code="fit_failed", client_error=False)

    @staticmethod
    async def _start() -> _Worker:
        try:
            return await asyncio.to_thread(_Worker)
        except (OSError, EOFError, TimeoutError) as exc:
            raise FitFailed(
                f"no fit worker could start: {exc}", param=None, code="fit_failed", client_error=False
            ) from exc

    def close(self) -> None:
        for worker in self._idle:
            worker.kill()
        self._idle.clear()


if __name__ == "__main__":
    # Through the module's import name, so that what it pickles names flexserv_anomaly.worker, not __main__.
    from flexserv_anomaly import worker

    worker._serve(multiprocessing.connection.Connection(int(sys.argv[1])))
