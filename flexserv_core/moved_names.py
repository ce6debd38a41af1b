"""Public names that left the core for a first-party library, so that a plugin written
against an older facade is told where each went instead of a bare ImportError."""

from __future__ import annotations

import re

_LIBRARIES: dict[tuple[str, str], tuple[str, ...]] = {
    ("flexserv_tool_parsers", "flexserv-tool-parsers"): (
        "CallSyntax", "JsonToolParser", "ParsedToolCall", "ParsedToolOutput", "ToolCallFragment",
        "ToolCallStream", "ToolParser", "ToolStreamEvent",
    ),
    ("flexserv_constraints", "flexserv-constraints"): (
        "BlockedMasks", "CompiledConstraint", "ConstraintVocabulary", "TokenMatcher", "fill_blocked_masks",
    ),
    ("flexserv_chat_templates", "flexserv-chat-templates"): (
        "ChatTemplates", "render_chat_template", "select_chat_template",
    ),
    ("flexserv_embeddings", "flexserv-embeddings"): ("EmbeddingLimits", "EmbeddingModel", "EmbeddingResult"),
    ("flexserv_audio", "flexserv-audio"): (
        "Transcription", "TranscriptionModel", "TranscriptionSegment", "TranscriptionTask", "TranscriptionWord",
    ),
    ("flexserv_resources", "flexserv-resources"): (
        "CpuCoreInfo", "GpuInfo", "RamInfo", "ResourceProbe", "SystemResourceSnapshot", "get_cpu_info",
        "get_gpu_info", "get_max_vram_used_pct", "get_ram_info", "get_system_resources",
    ),
    ("flexserv_batching", "flexserv-batching"): ("BatchRunner", "MicroBatcher"),
    ("flexserv_torch", "flexserv-torch"): (
        "IntraOpThreads", "full_intra_op_threads", "prefer_passive_openmp", "use_all_intra_op_threads",
    ),
}  # fmt: skip

#: name -> (module, distribution) it is imported from now
MOVED: dict[str, tuple[str, str]] = {name: where for where, names in _LIBRARIES.items() for name in names}

_FROM_CORE = re.compile(r"cannot import name '(\w+)' from 'flexserv_core'")


def moved_hint(exc: BaseException) -> str:
    """For ``from flexserv_core import X`` of a name that moved: where ``X`` is now
    (``""`` for any other error)."""
    found = _FROM_CORE.search(str(exc)) if isinstance(exc, ImportError) else None
    name = found.group(1) if found else ""
    if name not in MOVED:
        return ""
    module, distribution = MOVED[name]
    return f" ('{name}' moved out of the core: import it from {module} and depend on {distribution})"
