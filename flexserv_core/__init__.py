"""FlexServ: a plugin-based, OpenAI-compatible model server.

This module is the public API for plugins: everything a plugin needs is imported
from ``flexserv_core`` itself (tests may also use :mod:`flexserv_core.testing`).
Submodules are internal and may change between releases.
"""

import typing

from flexserv_core._version import VERSION as __version__
from flexserv_core.backends.base import (
    RESERVED_TEMPLATE_KWARGS,
    Backend,
    Constraint,
    ConstraintKind,
    EmbeddingModel,
    EmbeddingResult,
    EngineStats,
    FinishReason,
    ImageInput,
    LoadedModel,
    Placement,
    ProgressCallback,
    SamplingParams,
    TextGenerationModel,
    TextLimits,
    TokenDelta,
    TopLogprob,
    Transcription,
    TranscriptionModel,
    TranscriptionSegment,
    TranscriptionTask,
    TranscriptionWord,
)
from flexserv_core.batching import BatchRunner, MicroBatcher
from flexserv_core.commands import Command, CommandContext
from flexserv_core.constraints import (
    BlockedMasks,
    CompiledConstraint,
    ConstraintVocabulary,
    TokenMatcher,
    fill_blocked_masks,
    prepare_params,
)
from flexserv_core.errors import (
    ContextLengthExceeded,
    FlexServError,
    GatewayTimeout,
    InvalidRequest,
    ModelLoadError,
    ModelNotFound,
    NotFound,
    PayloadTooLarge,
    PluginCommandError,
    PluginError,
    PluginHookError,
    PluginLoadError,
    PluginNotInstalled,
    PluginStartupError,
    ServiceUnavailable,
    TooManyRequests,
    UnsupportedParameter,
    UsageError,
)
from flexserv_core.events import EvictionReason, ModelEvent, ModelEventType
from flexserv_core.hooks import resolve_plugin_settings
from flexserv_core.hookspecs import PROJECT_NAME, hookimpl, hookspec
from flexserv_core.models.registry import Lease, ModelInfo, ModelRegistry, ModelState, UnloadResult
from flexserv_core.models.spec import ModelKind, ModelSpec
from flexserv_core.openmp import IntraOpThreads, full_intra_op_threads, prefer_passive_openmp, use_all_intra_op_threads
from flexserv_core.plugin_manager import FlexServPluginManager, create_plugin_manager
from flexserv_core.request_context import RequestContext
from flexserv_core.resources import (
    CpuCoreInfo,
    GpuInfo,
    RamInfo,
    ResourceProbe,
    SystemResourceSnapshot,
    get_cpu_info,
    get_gpu_info,
    get_max_vram_used_pct,
    get_ram_info,
    get_system_resources,
)
from flexserv_core.server import FlexServer
from flexserv_core.settings import (
    CoreSettings,
    SettingField,
    Settings,
    default_cache_dir,
    describe_fields,
    resolve_settings,
)
from flexserv_core.stash import Stash, StashKey
from flexserv_core.tool_call_stream import CallSyntax, ToolCallFragment, ToolCallStream, ToolStreamEvent
from flexserv_core.tool_parsers import (
    JsonToolParser,
    ParsedToolCall,
    ParsedToolOutput,
    ToolParser,
    get_tool_parser,
    register_tool_parser,
    tool_parser_names,
)

__all__ = [
    "PROJECT_NAME",
    "RESERVED_TEMPLATE_KWARGS",
    "Backend",
    "BatchRunner",
    "BlockedMasks",
    "CallSyntax",
    "ChatTemplates",
    "Command",
    "CommandContext",
    "CompiledConstraint",
    "Constraint",
    "ConstraintKind",
    "ConstraintVocabulary",
    "ContextLengthExceeded",
    "CoreSettings",
    "CpuCoreInfo",
    "EmbeddingModel",
    "EmbeddingResult",
    "EngineStats",
    "EvictionReason",
    "FinishReason",
    "FlexServError",
    "FlexServPluginManager",
    "FlexServer",
    "GatewayTimeout",
    "GpuInfo",
    "ImageInput",
    "IntraOpThreads",
    "InvalidRequest",
    "JsonToolParser",
    "Lease",
    "LoadedModel",
    "MicroBatcher",
    "ModelEvent",
    "ModelEventType",
    "ModelInfo",
    "ModelKind",
    "ModelLoadError",
    "ModelNotFound",
    "ModelRegistry",
    "ModelSpec",
    "ModelState",
    "NotFound",
    "ParsedToolCall",
    "ParsedToolOutput",
    "PayloadTooLarge",
    "Placement",
    "PluginCommandError",
    "PluginError",
    "PluginHookError",
    "PluginLoadError",
    "PluginNotInstalled",
    "PluginStartupError",
    "ProgressCallback",
    "RamInfo",
    "RequestContext",
    "ResourceProbe",
    "SamplingParams",
    "ServiceUnavailable",
    "SettingField",
    "Settings",
    "Stash",
    "StashKey",
    "SystemResourceSnapshot",
    "TextGenerationModel",
    "TextLimits",
    "TokenDelta",
    "TokenMatcher",
    "TooManyRequests",
    "ToolCallFragment",
    "ToolCallStream",
    "ToolParser",
    "ToolStreamEvent",
    "TopLogprob",
    "Transcription",
    "TranscriptionModel",
    "TranscriptionSegment",
    "TranscriptionTask",
    "TranscriptionWord",
    "UnloadResult",
    "UnsupportedParameter",
    "UsageError",
    "__version__",
    "create_app",
    "create_plugin_manager",
    "default_cache_dir",
    "describe_fields",
    "fill_blocked_masks",
    "full_intra_op_threads",
    "get_cpu_info",
    "get_gpu_info",
    "get_max_vram_used_pct",
    "get_ram_info",
    "get_system_resources",
    "get_tool_parser",
    "hookimpl",
    "hookspec",
    "open_request_context",
    "parse_body",
    "prefer_passive_openmp",
    "prepare_params",
    "register_tool_parser",
    "render_chat_template",
    "resolve_plugin_settings",
    "resolve_settings",
    "select_chat_template",
    "tool_parser_names",
    "until_disconnect",
    "use_all_intra_op_threads",
]

if typing.TYPE_CHECKING:
    from flexserv_core.api.body import parse_body
    from flexserv_core.api.body import request_context as open_request_context
    from flexserv_core.api.disconnect import until_disconnect
    from flexserv_core.app import create_app
    from flexserv_core.chat_template import ChatTemplates, render_chat_template, select_chat_template

#: Route helpers for plugins that add JSON routes, and the app factory (for plugins
#: that serve the app another way, like ``flexserv ray-serve``). They need Litestar,
#: so they are imported on first use: ``import flexserv_core`` stays cheap.
_LAZY = {
    "create_app": ("flexserv_core.app", "create_app"),
    "parse_body": ("flexserv_core.api.body", "parse_body"),
    "open_request_context": ("flexserv_core.api.body", "request_context"),
    "until_disconnect": ("flexserv_core.api.disconnect", "until_disconnect"),
    # Chat-template rendering (sandboxed Jinja with transformers' semantics) for every
    # text backend; it needs jinja2, so it is imported on first use too.
    "ChatTemplates": ("flexserv_core.chat_template", "ChatTemplates"),
    "render_chat_template": ("flexserv_core.chat_template", "render_chat_template"),
    "select_chat_template": ("flexserv_core.chat_template", "select_chat_template"),
}


def __getattr__(name: str) -> object:
    target = _LAZY.get(name)
    if target is None:
        raise AttributeError(f"module 'flexserv_core' has no attribute {name!r}")
    import importlib

    module, attribute = target
    value = getattr(importlib.import_module(module), attribute)
    globals()[name] = value
    return value
