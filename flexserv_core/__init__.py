"""FlexServ: a plugin-based, OpenAI-compatible model server.

This module is the public API for plugins: everything a plugin needs is imported
from ``flexserv_core`` itself (tests may also use :mod:`flexserv_core.testing`).
Submodules are internal and may change between releases.
"""

import typing

from flexserv_core._version import VERSION as __version__
from flexserv_core.api.openai_params import Refusals, refuse_unsupported
from flexserv_core.api.wire_schemas import ErrorResponse
from flexserv_core.backends.base import (
    RESERVED_TEMPLATE_KWARGS,
    SAMPLING_EXTENSIONS,
    Backend,
    Constraint,
    ConstraintKind,
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
)
from flexserv_core.commands import Command, CommandContext
from flexserv_core.constraints import ConstraintCompiler, prepare_params
from flexserv_core.edge.owner import request_owner, request_reads_any_owner
from flexserv_core.errors import (
    ClientDisconnected,
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
    QuotaExceeded,
    ServiceUnavailable,
    StateUnavailable,
    TemplateVariablesMisconfigured,
    TooManyRequests,
    UnsupportedMediaType,
    UnsupportedParameter,
    UsageError,
)
from flexserv_core.events import EvictionReason, ModelEvent, ModelEventType
from flexserv_core.hooks import call_hook, hook_error, resolve_plugin_settings
from flexserv_core.hookspecs import PROJECT_NAME, hookimpl, hookspec
from flexserv_core.media import PDF_MEDIA_TYPE, sniff_media_type
from flexserv_core.models.registry import Lease, ModelInfo, ModelRegistry, ModelState, UnloadResult
from flexserv_core.models.spec import ModelKind, ModelSpec
from flexserv_core.plugin_manager import FlexServPluginManager, create_plugin_manager
from flexserv_core.request_context import RequestContext
from flexserv_core.server import FlexServer
from flexserv_core.settings import (
    CoreSettings,
    Settings,
    default_cache_dir,
    resolve_settings,
)
from flexserv_core.stash import Stash, StashKey
from flexserv_core.template_variables import CHAT_TEMPLATE_DEFAULTS, CHAT_TEMPLATE_REQUEST, reserved_template_names
from flexserv_core.tool_calling import ToolCalling, ToolCallStreamer, ToolPlan

__all__ = [
    "CHAT_TEMPLATE_DEFAULTS",
    "CHAT_TEMPLATE_REQUEST",
    "PDF_MEDIA_TYPE",
    "PROJECT_NAME",
    "READY",
    "RESERVED_TEMPLATE_KWARGS",
    "SAMPLING_EXTENSIONS",
    "SSE_DONE",
    "Backend",
    "ChatCompletionRequest",
    "ChatMessage",
    "ClientDisconnected",
    "Command",
    "CommandContext",
    "Constraint",
    "ConstraintCompiler",
    "ConstraintKind",
    "ContextLengthExceeded",
    "CoreSettings",
    "EngineStats",
    "ErrorResponse",
    "EvictionReason",
    "FinishReason",
    "FlexServError",
    "FlexServPluginManager",
    "FlexServer",
    "FunctionDefinition",
    "GatewayTimeout",
    "ImageInput",
    "InvalidRequest",
    "JsonSchemaFormat",
    "Lease",
    "LoadedModel",
    "ModelEvent",
    "ModelEventType",
    "ModelInfo",
    "ModelKind",
    "ModelLoadError",
    "ModelNotFound",
    "ModelRegistry",
    "ModelSpec",
    "ModelState",
    "NamedFunction",
    "NamedToolChoice",
    "NotFound",
    "PayloadTooLarge",
    "Placement",
    "PluginCommandError",
    "PluginError",
    "PluginHookError",
    "PluginLoadError",
    "PluginNotInstalled",
    "PluginStartupError",
    "ProgressCallback",
    "QuotaExceeded",
    "Refusals",
    "RequestContext",
    "ResponseFormat",
    "SSEGenerator",
    "SamplingParams",
    "ServiceUnavailable",
    "Settings",
    "Stash",
    "StashKey",
    "StateUnavailable",
    "TemplateVariablesMisconfigured",
    "TextGenerationModel",
    "TextLimits",
    "TextSession",
    "TokenDelta",
    "TooManyRequests",
    "Tool",
    "ToolCall",
    "ToolCallDelta",
    "ToolCallDeltaFunction",
    "ToolCallFunction",
    "ToolCallStreamer",
    "ToolCalling",
    "ToolChoice",
    "ToolPlan",
    "TopLogprob",
    "UnloadResult",
    "UnsupportedMediaType",
    "UnsupportedParameter",
    "UsageError",
    "__version__",
    "call_hook",
    "chat_prompt_ids",
    "check_chat_request",
    "check_prompt_chars",
    "check_prompt_text",
    "check_token_ids",
    "convert_param",
    "create_app",
    "create_plugin_manager",
    "decode_json_object",
    "default_cache_dir",
    "error_event",
    "hook_error",
    "hookimpl",
    "hookspec",
    "open_request_context",
    "parse_body",
    "parse_fields",
    "prepare_params",
    "read_body",
    "refuse_unsupported",
    "request_owner",
    "request_reads_any_owner",
    "reserved_template_names",
    "resolve_plugin_settings",
    "resolve_settings",
    "route_scope",
    "sniff_media_type",
    "sse_event",
    "sse_response",
    "until_disconnect",
    "validate_body",
]

if typing.TYPE_CHECKING:
    from flexserv_core.api.body import convert_param, decode_json_object, parse_body, parse_fields, read_body
    from flexserv_core.api.body import request_context as open_request_context
    from flexserv_core.api.body import validate as validate_body
    from flexserv_core.api.disconnect import until_disconnect
    from flexserv_core.api.streaming import DONE as SSE_DONE
    from flexserv_core.api.streaming import READY, SSEGenerator, error_event, sse_event, sse_response
    from flexserv_core.api.text_request import chat_prompt_ids
    from flexserv_core.api.text_schemas import (
        ChatCompletionRequest,
        ChatMessage,
        FunctionDefinition,
        JsonSchemaFormat,
        NamedFunction,
        NamedToolChoice,
        ResponseFormat,
        Tool,
        ToolCall,
        ToolCallDelta,
        ToolCallDeltaFunction,
        ToolCallFunction,
        ToolChoice,
    )
    from flexserv_core.api.text_session import TextSession
    from flexserv_core.api.text_validation import (
        check_chat_request,
        check_prompt_chars,
        check_prompt_text,
        check_token_ids,
    )
    from flexserv_core.app import create_app
    from flexserv_core.edge.auth import route_scope

#: Route helpers for plugins that add JSON routes, and the app factory (for plugins
#: that serve the app another way, like ``flexserv ray-serve``). They need Litestar,
#: so they are imported on first use: ``import flexserv_core`` stays cheap.
_LAZY = {
    "create_app": ("flexserv_core.app", "create_app"),
    "parse_body": ("flexserv_core.api.body", "parse_body"),
    "open_request_context": ("flexserv_core.api.body", "request_context"),
    "until_disconnect": ("flexserv_core.api.disconnect", "until_disconnect"),
    "route_scope": ("flexserv_core.edge.auth", "route_scope"),
    "convert_param": ("flexserv_core.api.body", "convert_param"),
    # a route that reads its body itself (a multipart form: the audio plugin; an NPY file:
    # the anomaly plugin)
    "validate_body": ("flexserv_core.api.body", "validate"),
    "read_body": ("flexserv_core.api.body", "read_body"),
    "parse_fields": ("flexserv_core.api.body", "parse_fields"),
    # JSON that comes another way (the anomaly plugin's header), refused as a JSON body is
    "decode_json_object": ("flexserv_core.api.body", "decode_json_object"),
    # A text route outside the core (the Responses API plugin): the chat request it
    # builds, the checks and the session that serve it, its tool calls and its stream
    # (and the tool-calling plugin's: the calls it writes).
    **{
        name: ("flexserv_core.api.text_schemas", name)
        for name in (
            "ChatCompletionRequest",
            "ChatMessage",
            "FunctionDefinition",
            "JsonSchemaFormat",
            "NamedFunction",
            "NamedToolChoice",
            "ResponseFormat",
            "Tool",
            "ToolCall",
            "ToolCallDelta",
            "ToolCallDeltaFunction",
            "ToolCallFunction",
            "ToolChoice",
        )
    },
    "check_chat_request": ("flexserv_core.api.text_validation", "check_chat_request"),
    # a route that counts prompts and ids as the text routes read them (the tokenize plugin)
    **{name: ("flexserv_core.api.text_validation", name) for name in ("check_prompt_chars", "check_token_ids")},
    # a text backend's bound on a rendered chat prompt, before it tokenises it
    "check_prompt_text": ("flexserv_core.api.text_validation", "check_prompt_text"),
    "chat_prompt_ids": ("flexserv_core.api.text_request", "chat_prompt_ids"),
    "TextSession": ("flexserv_core.api.text_session", "TextSession"),
    "sse_response": ("flexserv_core.api.streaming", "sse_response"),
    "READY": ("flexserv_core.api.streaming", "READY"),
    "SSEGenerator": ("flexserv_core.api.streaming", "SSEGenerator"),
    # the pieces of an OpenAI stream, for a route that writes its own events
    "sse_event": ("flexserv_core.api.streaming", "sse_event"),
    "error_event": ("flexserv_core.api.streaming", "error_event"),
    "SSE_DONE": ("flexserv_core.api.streaming", "DONE"),
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
