"""The few llama.cpp calls the backend makes, through llama-cpp-python's ctypes API.

:class:`LlamaRuntime` owns one model, one context (a unified KV cache shared by
``n_seq_max`` sequences) and one batch. It is not thread-safe: the engine thread
makes every decode and cache call; tokenizing only reads the vocabulary and may
run on any thread. Such a call may outlive the request that started it (a worker
thread its cancelled request left behind), so :meth:`LlamaRuntime.close` waits for
the vocabulary calls under way before it frees the model.
"""

from __future__ import annotations

import ctypes
import logging
import os
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import numpy as np

from flexserv_core import ModelLoadError, ServiceUnavailable

log = logging.getLogger(__name__)

_init_lock = threading.Lock()
_initialised = False
_log_callback: Any = None  # kept alive: llama.cpp calls it from C

#: llama.cpp's log levels (ggml_log_level) as Python's
#: How long :meth:`LlamaRuntime.close` waits for vocabulary calls under way (the longest
#: is tokenizing a prompt of ``--max-prompt-chars``, about a second) before it leaves the
#: model unfreed rather than free it under them.
CLOSE_WAIT_S = 30.0

_LEVELS = {1: logging.DEBUG, 2: logging.INFO, 3: logging.WARNING, 4: logging.ERROR}


def _llama() -> Any:
    """The binding, imported and initialised once (its import loads libllama)."""
    global _initialised, _log_callback
    import llama_cpp

    with _init_lock:
        if not _initialised:
            llama_cpp.llama_backend_init()

            def forward(level: int, text: bytes, _user: Any) -> None:
                # llama.cpp is chatty at INFO (every tensor, every graph): keep warnings and errors
                if level in (3, 4) and text:
                    log.log(
                        _LEVELS.get(level, logging.WARNING), "llama.cpp: %s", text.decode(errors="replace").rstrip()
                    )

            _log_callback = llama_cpp.llama_log_callback(forward)
            llama_cpp.llama_log_set(_log_callback, ctypes.c_void_p(0))
            _initialised = True
    return llama_cpp


class LlamaRuntime:
    """A loaded GGUF with its context; see the module docstring."""

    def __init__(
        self,
        path: Path,
        *,
        n_ctx: int,
        n_seq_max: int,
        n_batch: int,
        n_threads: int,
        flash_attention: str = "auto",
        kv_cache_type: str = "f16",
    ) -> None:
        llama = self.llama = _llama()
        mparams = llama.llama_model_default_params()
        mparams.n_gpu_layers = 0
        # The CPU "extra buffer types" (weight repacking for AMX and friends) crash
        # llama-cpp-python 0.3.36 on the first decode on some CI CPUs: plain buffers.
        mparams.use_extra_bufts = False
        model = llama.llama_model_load_from_file(str(path).encode(), mparams)
        if not model:
            raise ModelLoadError(f"llama.cpp could not load {path.name} (see the log for why).", param="model")
        self.model = model
        cparams = llama.llama_context_default_params()
        cparams.n_ctx = n_ctx
        cparams.n_batch = n_batch
        cparams.n_ubatch = n_batch
        cparams.n_seq_max = n_seq_max
        cparams.n_threads = n_threads
        cparams.n_threads_batch = n_threads
        cparams.flash_attn_type = {
            "auto": llama.LLAMA_FLASH_ATTN_TYPE_AUTO,
            "on": llama.LLAMA_FLASH_ATTN_TYPE_ENABLED,
            "off": llama.LLAMA_FLASH_ATTN_TYPE_DISABLED,
        }[flash_attention]
        cparams.type_k = cparams.type_v = {"f16": llama.GGML_TYPE_F16, "q8_0": llama.GGML_TYPE_Q8_0}[kv_cache_type]
        self.kv_cache_type = kv_cache_type
        self.n_threads = n_threads
        cparams.kv_unified = True  # one pool of cells: any sequence may use the whole context
        cparams.no_perf = True
        ctx = llama.llama_init_from_model(model, cparams)
        if not ctx:
            llama.llama_model_free(model)
            raise ModelLoadError(
                f"llama.cpp could not create a context of {n_ctx} tokens for {path.name}.", param="model"
            )
        self.ctx = ctx
        self.memory = llama.llama_get_memory(ctx)
        self.vocab = llama.llama_model_get_vocab(model)
        self.n_vocab = int(llama.llama_vocab_n_tokens(self.vocab))
        self.n_ctx = int(llama.llama_n_ctx(ctx))
        self.n_batch = n_batch
        self.n_seq_max = n_seq_max
        self.batch = llama.llama_batch_init(n_batch, 0, 1)
        self._tokens = np.ctypeslib.as_array(self.batch.token, shape=(n_batch,))
        self._pos = np.ctypeslib.as_array(self.batch.pos, shape=(n_batch,))
        self._n_seq = np.ctypeslib.as_array(self.batch.n_seq_id, shape=(n_batch,))
        self._logits = np.ctypeslib.as_array(self.batch.logits, shape=(n_batch,))
        self._n_seq[:] = 1
        self._pieces: dict[int, bytes] = {}
        self._pieces_special: dict[int, bytes] = {}
        self._eog = frozenset(t for t in range(self.n_vocab) if llama.llama_vocab_is_eog(self.vocab, t))
        self._control = tuple(t for t in range(self.n_vocab) if llama.llama_vocab_is_control(self.vocab, t))
        self.closed = False
        self._readers = 0
        self._readers_changed = threading.Condition()

    @contextmanager
    def _reading(self) -> Iterator[None]:
        """A vocabulary call from any thread: :meth:`close` waits for it to end, and
        once closed the model is not read at all."""
        with self._readers_changed:
            if self.closed:
                raise ServiceUnavailable("The model was unloaded while this request was using it; retry.")
            self._readers += 1
        try:
            yield
        finally:
            with self._readers_changed:
                self._readers -= 1
                self._readers_changed.notify_all()

    # -- vocabulary (any thread) ---------------------------------------------------

    @property
    def eog_tokens(self) -> frozenset[int]:
        """End-of-generation tokens (end of text, end of turn...)."""
        return self._eog

    def token_text(self, token: int) -> str:
        """The token's text as the vocabulary stores it (special tokens too)."""
        with self._reading():
            raw = self.llama.llama_vocab_get_text(self.vocab, token)
        return raw.decode(errors="replace") if raw else ""

    @property
    def control_tokens(self) -> tuple[int, ...]:
        """The control tokens' ids (``<|im_start|>``, end of text...), in id order."""
        return self._control

    def special_id(self, which: str) -> int | None:
        """The id of the vocabulary's ``bos``/``eos``/``eot``... token, if it has one."""
        fn = getattr(self.llama, f"llama_vocab_{which}", None)
        token = int(fn(self.vocab)) if fn is not None else -1
        return token if 0 <= token < self.n_vocab else None

    def special_token(self, which: str) -> str | None:
        token = self.special_id(which)
        return self.token_text(token) if token is not None else None

    def tokenize(self, text: str | bytes, *, add_special: bool, parse_special: bool = True) -> list[int]:
        data = text.encode() if isinstance(text, str) else text
        size = len(data) + 8
        while True:
            buf = (self.llama.llama_token * size)()
            with self._reading():
                n = self.llama.llama_tokenize(self.vocab, data, len(data), buf, size, add_special, parse_special)
            if n >= 0:
                return list(buf[:n])
            size = -n

    @property
    def vocab_type(self) -> int:
        """llama.cpp's tokenizer kind (``LLAMA_VOCAB_TYPE_SPM``, ``_BPE``, ...)."""
        return int(self.llama.llama_vocab_type(self.vocab))

    def token_attr(self, token: int) -> int:
        """The token's ``LLAMA_TOKEN_ATTR_*`` flags."""
        return int(self.llama.llama_vocab_get_attr(self.vocab, token))

    def piece_size(self, token: int) -> int:
        """How many bytes the token decodes to, special tokens as their text (not cached)."""
        n = int(self.llama.llama_token_to_piece(self.vocab, token, None, 0, 0, True))
        return -n if n < 0 else n

    def piece(self, token: int, *, special: bool = False) -> bytes:
        """The bytes token ``token`` decodes to (control tokens: empty unless ``special``)."""
        cache = self._pieces_special if special else self._pieces
        out = cache.get(token)
        if out is None:
            buf = ctypes.create_string_buffer(64)
            with self._reading():
                n = self.llama.llama_token_to_piece(self.vocab, token, buf, 64, 0, special)
                if n < 0:
                    buf = ctypes.create_string_buffer(-n)
                    n = self.llama.llama_token_to_piece(self.vocab, token, buf, -n, 0, special)
            out = cache[token] = buf.raw[:n]
        return out

    # -- engine thread -------------------------------------------------------------

    def seq_rm(self, seq: int, p0: int = -1, p1: int = -1) -> bool:
        """Drop positions ``[p0, p1)`` of sequence ``seq`` from the cache (-1: open end)."""
        return bool(self.llama.llama_memory_seq_rm(self.memory, seq, p0, p1))

    def seq_cp(self, src: int, dst: int, p0: int, p1: int) -> None:
        """Share positions ``[p0, p1)`` of ``src`` with ``dst`` (cells are shared, not copied)."""
        self.llama.llama_memory_seq_cp(self.memory, src, dst, p0, p1)

    def decode(self, tokens: list[int], positions: list[int], seqs: list[int], outputs: list[bool]) -> int:
        """One ``llama_decode`` of the given rows; returns its status (0: done,
        1: no room in the KV cache, other: error). Logits rows follow the order of
        the rows with ``outputs`` set (see :meth:`logits`)."""
        n = len(tokens)
        assert 0 < n <= self.n_batch
        self.batch.n_tokens = n
        self._tokens[:n] = tokens
        self._pos[:n] = positions
        self._logits[:n] = outputs
        seq_id = self.batch.seq_id
        for i, seq in enumerate(seqs):
            seq_id[i][0] = seq
        return int(self.llama.llama_decode(self.ctx, self.batch))

    def logits(self, rows: int) -> np.ndarray:
        """The last decode's output logits, ``[rows, n_vocab]`` (a view: copy what you keep)."""
        ptr = self.llama.llama_get_logits(self.ctx)
        return np.ctypeslib.as_array(ptr, shape=(rows, self.n_vocab))

    def close(self, wait: float = CLOSE_WAIT_S) -> bool:
        """Free the batch, the context and the model once no vocabulary call is under way
        (idempotent). ``False`` when calls still ran after ``wait`` seconds: the memory is
        left unfreed, never freed under them."""
        with self._readers_changed:
            if self.closed:
                return True
            self.closed = True
            if not self._readers_changed.wait_for(lambda: self._readers == 0, timeout=wait):
                log.error("llama.cpp's model is not freed: a vocabulary call still runs after %.0f s", wait)
                return False
        self.llama.llama_batch_free(self.batch)
        self.llama.llama_free(self.ctx)
        self.llama.llama_model_free(self.model)
        return True


#: The load-time check of :func:`rows_batch_invariant`: a prefix, then rows decoded one
#: by one and again in one batch after another sequence's prompt chunk.
_PROBE_TEXT = "Speculative rows must not depend on their batch: 0123456789 the quick brown fox. " * 4
_PROBE_PREFIX, _PROBE_ROWS, _PROBE_OTHER = 8, 8, 40


def rows_batch_invariant(runtime: LlamaRuntime) -> bool:
    """Whether a row's logits are bit for bit the same decoded alone and decoded with
    other rows of its sequence and of another sequence's prompt in one batch: what
    speculation needs to keep greedy output unchanged. It depends on llama.cpp's CPU
    kernels for the weights' and the cache's types (with an f16 cache and several
    threads a single row over 512 or more cells takes another attention path, which
    this short probe does not reach: :func:`flexserv_llamacpp.backend.speculation_of`
    rules that case out). Run at load, before the engine starts, on sequences 0 and 1
    (0 alone with one sequence slot), which it leaves empty."""
    ids = runtime.tokenize(_PROBE_TEXT, add_special=False)
    prefix, rows = ids[:_PROBE_PREFIX], ids[_PROBE_PREFIX : _PROBE_PREFIX + _PROBE_ROWS]
    k = len(rows)
    m = min(_PROBE_OTHER, runtime.n_batch - k) if runtime.n_seq_max > 1 else 0
    other = (ids[::-1] * m)[:m]
    n = len(prefix)
    try:
        if k < _PROBE_ROWS or n + k > runtime.n_ctx:
            return False
        if runtime.decode(prefix, list(range(n)), [0] * n, [False] * n) != 0:
            return False
        alone = []
        for i, token in enumerate(rows):
            if runtime.decode([token], [n + i], [0], [True]) != 0:
                return False
            alone.append(runtime.logits(1)[0].copy())
        runtime.seq_rm(0, n, -1)
        status = runtime.decode(
            other + rows, [*range(m), *range(n, n + k)], [1] * m + [0] * k, [False] * m + [True] * k
        )
        return status == 0 and bool(np.array_equal(runtime.logits(k), np.stack(alone)))
    finally:
        runtime.seq_rm(0)
        if runtime.n_seq_max > 1:
            runtime.seq_rm(1)


def default_threads() -> int:
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
