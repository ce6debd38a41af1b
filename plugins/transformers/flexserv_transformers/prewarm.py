"""Import torch and transformers in the background while the server starts.

Importing them takes seconds (most of a cold start's time to the first token),
and the first request's model load would otherwise pay for it. :func:`start` runs
the imports on a daemon thread when the server starts; :func:`wait` (called by
the backend before it loads a model) joins it, so the two never import the same
modules at once from two threads.
"""

from __future__ import annotations

import importlib
import logging
import threading
import time
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from flexserv_transformers.settings import TransformersSettings

log = logging.getLogger(__name__)

#: What a text model's load and its first step import, heaviest first.
MODULES = (
    "torch",
    "transformers",
    "transformers.modeling_utils",
    "transformers.generation",
    "transformers.models.auto.modeling_auto",
    "transformers.models.auto.tokenization_auto",
    "transformers.models.llama.modeling_llama",
    "flexserv_transformers.loading",
    "flexserv_transformers.engine.engine",
    "flexserv_transformers.model",
)
#: The same for FlexServ's own Llama forward: no transformers at all (its tokenizer is
#: FastTokenizer's; a checkpoint that needs AutoTokenizer imports it at load).
LEAN_MODULES = (
    "torch",
    "flexserv_transformers.fast_tokenizer",
    "flexserv_transformers.loading",
    "flexserv_transformers.native.loading",
    "flexserv_transformers.engine.engine",
    "flexserv_transformers.model",
)

_lock = threading.Lock()
_thread: threading.Thread | None = None


def modules_for(settings: TransformersSettings) -> tuple[str, ...]:
    """What to import for these settings: :data:`LEAN_MODULES` when FlexServ's own
    forward may run the model (a fallback to transformers imports the rest at load)."""
    lean = settings.transformers_model_code != "transformers" and settings.transformers_engine == "paged"
    return LEAN_MODULES if lean else MODULES


def _run(modules: tuple[str, ...]) -> None:
    started = time.perf_counter()
    for name in modules:
        try:
            importlib.import_module(name)
        except Exception:  # the load will import it again and report the error properly
            log.debug("background import of %s failed", name, exc_info=True)
    if modules is not LEAN_MODULES:
        _build_weight_mappings()
    log.info("torch and transformers imported in the background in %.2f s", time.perf_counter() - started)


def _build_weight_mappings() -> None:
    """Build transformers' table of checkpoint key conversions now.

    The first ``from_pretrained`` of a process builds it for every model type
    (~1,200 regular expressions, more than ``re``'s cache keeps): measured as most
    of the first load's time after the imports. It is cached for the process, so
    building it here takes that off the first request. A private helper of
    transformers, hence optional: without it the load builds the table itself.
    """
    try:
        from transformers.conversion_mapping import get_checkpoint_conversion_mapping

        get_checkpoint_conversion_mapping("llama")
    except Exception:
        log.debug("building transformers' weight conversion table failed", exc_info=True)


def start(modules: tuple[str, ...] = MODULES) -> None:
    """Start the background imports of ``modules`` (once per process)."""
    global _thread
    with _lock:
        if _thread is None:
            _thread = threading.Thread(target=_run, args=(modules,), name="flexserv-prewarm", daemon=True)
            _thread.start()


def wait() -> None:
    """Block until the background imports, if started, are done."""
    with _lock:
        thread = _thread
    if thread is not None:
        thread.join()
