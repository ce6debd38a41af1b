"""Fits run in worker processes, so that one can be stopped.

A scikit-learn fit cannot be interrupted inside a thread. Each fit is sent to a
warm worker process (scikit-learn already imported) over a pipe; when the
client disconnects or the fit passes its time budget the worker is killed and
a new one takes its place, so a runaway fit costs nothing after it is stopped.
The worker answers in three messages (over our own pipe, from our own child: not a
file anyone else wrote): first its scaler, before it fits, so that the server
scales the rows it sent the same way and writes them into the stored form while
the worker fits; then the score statistics and the fingerprint, which complete
the stored form and the fit's answer; then the fitted model itself, for the
first load of this process to take instead of refitting. The fit is answered
once the stored form is stored, while the model is pickled, sent and unpickled
(~5-15 ms for 100 trees): a load that needs the model before it has arrived
waits for it (:class:`FreshModel`), and one whose model never arrives refits
from the store as after a restart.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import logging
import multiprocessing.connection
import pickle
import socket
import subprocess
import sys
import time
from dataclasses import dataclass
from typing import Any

import numpy as np

from flexserv_anomaly import codec, fitted
from flexserv_anomaly.fitted import FitSpec, FittedModel, ScoreStats

log = logging.getLogger(__name__)
#: Seconds a new worker may take to start and import scikit-learn.
STARTUP_TIMEOUT = 120.0


#: Seconds the fitted model may take to arrive after the fit's answer before the
#: worker is killed (the model is then refitted from the store on its first load).
HANDOVER_TIMEOUT = 60.0


@dataclass
class FitOutcome:
    """What the fit's answer and the store need: the model's encoded form and statistics."""

    header: dict[str, Any]
    blob: bytes
    stats: ScoreStats
    training_time_ms: float
    n_features: int


class FreshModel:
    """The fitted model of a fit that was just answered, arriving from its worker."""

    def __init__(self) -> None:
        self._future: concurrent.futures.Future[FittedModel] = concurrent.futures.Future()

    def set(self, model: FittedModel | None) -> None:
        if model is None:
            self._future.set_exception(LookupError("the fitted model did not arrive from its worker"))
        else:
            self._future.set_result(model)

    def wait(self, timeout: float = HANDOVER_TIMEOUT) -> FittedModel | None:
        """The model, or ``None`` if it did not arrive (then refit from the store)."""
        try:
            return self._future.result(timeout)
        except (LookupError, TimeoutError):
            return None

    def ready(self) -> bool:
        return self._future.done()


class FitFailed(Exception):
    """The fit raised; ``param``/``code`` say whether it was the request's fault."""

    def __init__(self, message: str, *, param: str | None, code: str, client_error: bool) -> None:
        super().__init__(message)
        self.param = param
        self.code = code
        self.client_error = client_error


class FitTimedOut(Exception):
    pass


@dataclass
class FitDone:
    """The worker's answer to a fit: what the stored form needs besides the rows."""

    stats: ScoreStats
    fingerprint: np.ndarray
    training_time_ms: float
    fitted_at: float


def _serve(conn: multiprocessing.connection.Connection) -> None:
    import sklearn.ensemble  # noqa: F401  (warm: no fit's time budget pays the import)

    from flexserv_anomaly import detectors

    def scaled(center: np.ndarray, scale: np.ndarray) -> None:
        conn.send(("scaled", (center, scale)))

    conn.send(("ready", None))
    while True:
        try:
            spec, shape, dtype = conn.recv()
            # The rows' bytes as they are (read-only: nothing here writes into them).
            x = np.frombuffer(conn.recv_bytes(), dtype=np.dtype(dtype)).reshape(shape)
        except (EOFError, OSError):
            return
        model: FittedModel | None = None
        try:
            model = fitted.fit(spec, x, scaled)
            result: tuple[str, Any] = (
                "ok",
                FitDone(model.stats, model.fingerprint, model.training_time_ms, model.fitted_at),
            )
        except detectors.DetectorError as exc:
            result = ("invalid", (str(exc), exc.param, exc.code))
        except ValueError as exc:  # scikit-learn's word on parameters that do not fit these rows
            result = ("invalid", (str(exc), "parameters", "invalid_fit"))
        except MemoryError:
            result = ("error", "the fit ran out of memory")
        except Exception as exc:
            result = ("error", f"{type(exc).__name__}: {exc}")
        conn.send(result)
        if model is not None:
            # After the answer: the server stores the model and answers meanwhile.
            try:
                conn.send(model)
            except (pickle.PicklingError, TypeError, AttributeError):
                conn.send(None)  # the server refits it from the store on its first load


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

    def call(self, spec: FitSpec, x: np.ndarray, name: str) -> tuple[str, Any]:
        """Fit ``x`` in the worker; ``("ok", FitOutcome)`` or the worker's refusal. The worker
        tells the scaler first, and the stored form's rows are scaled and written here while
        it fits (the same values: :func:`fitted.scale_rows`), so that they need not come back
        over the pipe (1.3 MB for 10,000 x 16 rows) nor be written after the fit."""
        # The rows as raw bytes after a small header: pickling them into the message and out
        # of it cost ~1 ms more for 10,000 x 16 (1.26 against 0.23 ms, round trip measured).
        x = np.ascontiguousarray(x)
        self.conn.send((spec, x.shape, x.dtype.str))
        self.conn.send_bytes(x.data.cast("B"))
        archive: codec.Archive | None = None
        while True:
            status, payload = self.conn.recv()
            if status != "scaled":
                break
            center, scale = payload
            archive = codec.Archive(center, scale, fitted.scale_rows(x, center, scale))
        if status != "ok":
            return status, payload
        done: FitDone = payload
        try:
            if archive is None:
                raise RuntimeError("the fit's worker did not send its scaler")
            header, blob = codec.encode_fit(
                name,
                spec,
                done.stats,
                archive,
                done.fingerprint,
                training_time_ms=done.training_time_ms,
                fitted_at=done.fitted_at,
            )
        except Exception as exc:
            self.conn.recv()  # the fitted model the worker sends next: this fit is not kept
            if isinstance(exc, ValueError):  # e.g. statistics that JSON cannot hold
                return "invalid", (str(exc), "parameters", "invalid_fit")
            return "error", f"{type(exc).__name__}: {exc}"
        return "ok", FitOutcome(header, blob, done.stats, done.training_time_ms, int(x.shape[1]))

    def receive_model(self, timeout: float) -> FittedModel | None:
        """The fitted model the worker sends after an ``ok``; ``None`` if it does not come."""
        try:
            if not self.conn.poll(timeout):
                return None
            model = self.conn.recv()
        except Exception:  # a broken pipe or an unreadable object: the caller kills the worker
            return None
        return model if isinstance(model, FittedModel) else None

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
        self._handing_over: set[_Worker] = set()
        self._tasks: set[asyncio.Task[None]] = set()  # strong references to the hand-overs
        self.killed = 0

    async def fit(self, spec: FitSpec, x: np.ndarray, name: str, *, budget: float) -> tuple[FitOutcome, FreshModel]:
        """Fit in a worker; cancelling the awaiting task (a disconnect) or passing
        ``budget`` seconds kills the worker. Raises :class:`FitFailed` or :class:`FitTimedOut`.

        Returns once the worker has sent the encoded model; the fitted object follows
        into the :class:`FreshModel`, and the worker (and its slot) is free after that."""
        await self._slots.acquire()
        released = False
        try:
            worker = self._idle.pop() if self._idle else await self._start()
            started = time.monotonic()
            keep = False
            try:
                status, payload = await asyncio.wait_for(asyncio.to_thread(worker.call, spec, x, name), budget)
                keep = True
            except TimeoutError:
                raise FitTimedOut(f"the fit did not finish within {budget:g} s") from None
            except (EOFError, OSError):
                raise FitFailed(
                    "the fit's worker process died (out of memory?)", param=None, code="fit_failed", client_error=False
                ) from None
            except Exception as exc:
                # This side's part of the fit (scaling and archiving the rows while the worker
                # fits, e.g. a MemoryError) failed: the same answer as a failure in the worker,
                # not a 500 counted as a cancelled fit. The worker is in the middle of its
                # answer, so it is not kept (killed below, a fresh one starts on the next fit).
                log.warning("a fit failed on the server's side: its worker is replaced", exc_info=True)
                detail = f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__
                raise FitFailed(
                    f"the fit failed on the server ({detail})", param=None, code="fit_failed", client_error=False
                ) from None
            finally:
                if not keep:
                    self.killed += 1
                    log.info("stopping a fit after %.1f s: its worker is killed", time.monotonic() - started)
                    await asyncio.to_thread(worker.kill)
            if status == "ok":
                fresh = FreshModel()
                # The hand-over owns the worker and the slot from here: no cancellation of this
                # request may interrupt it (the pipe would be left in the middle of a message).
                self._handing_over.add(worker)
                task = asyncio.get_running_loop().create_task(self._hand_over(worker, fresh))
                self._tasks.add(task)
                task.add_done_callback(self._tasks.discard)
                released = True
                outcome: FitOutcome = payload
                return outcome, fresh
            self._release(worker)
        finally:
            if not released:
                self._slots.release()
        if status == "invalid":
            message, param, code = payload
            raise FitFailed(message, param=param, code=code, client_error=True)
        raise FitFailed(str(payload), param=None, code="fit_failed", client_error=False)

    def _release(self, worker: _Worker) -> None:
        if worker.alive():
            self._idle.append(worker)
        else:
            self.killed += 1
            worker.kill()

    async def _hand_over(self, worker: _Worker, fresh: FreshModel) -> None:
        model: FittedModel | None = None
        try:
            model = await asyncio.to_thread(worker.receive_model, HANDOVER_TIMEOUT)
            if model is None:
                self.killed += 1
                await asyncio.to_thread(worker.kill)
            else:
                self._release(worker)
        finally:
            self._handing_over.discard(worker)
            fresh.set(model)
            self._slots.release()

    @staticmethod
    async def _start() -> _Worker:
        try:
            return await asyncio.to_thread(_Worker)
        except (OSError, EOFError, TimeoutError) as exc:
            raise FitFailed(
                f"no fit worker could start: {exc}", param=None, code="fit_failed", client_error=False
            ) from exc

    def close(self) -> None:
        for worker in [*self._idle, *self._handing_over]:
            worker.kill()
        self._idle.clear()


if __name__ == "__main__":
    # Through the module's import name, so that what it pickles names flexserv_anomaly.worker, not __main__.
    from flexserv_anomaly import worker

    worker._serve(multiprocessing.connection.Connection(int(sys.argv[1])))
