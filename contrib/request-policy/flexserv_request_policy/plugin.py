"""Hook implementations of the request-policy plugin."""

from __future__ import annotations

from typing import Annotated, Any

import msgspec
from litestar import Request, get

from flexserv_core import FlexServer, RequestContext, Settings, StashKey, hookimpl

GENERATION_ENDPOINTS = ("/v1/chat/completions", "/v1/completions")
TOKEN_FIELDS = ("max_tokens", "max_completion_tokens")


class RequestPolicySettings(msgspec.Struct, kw_only=True):
    request_policy_max_tokens_cap: Annotated[
        Annotated[int, msgspec.Meta(ge=1)] | None, msgspec.Meta(description="Lower max_tokens above this value to it.")
    ] = None
    request_policy_default_temperature: Annotated[
        Annotated[float, msgspec.Meta(ge=0, le=2)] | None,
        msgspec.Meta(description="Temperature for requests that set none."),
    ] = None


class PolicyCounters:
    """Counts kept on the server (``server.state``), never in module globals."""

    def __init__(self) -> None:
        self.capped = 0
        self.defaulted = 0


COUNTERS_KEY = StashKey[PolicyCounters]("request-policy.counters")
CAPPED_KEY = StashKey[str]("request-policy.capped")


def _counters(server: FlexServer) -> PolicyCounters:
    return server.state.setdefault(COUNTERS_KEY, PolicyCounters())


@hookimpl
def flexserv_add_settings() -> type[msgspec.Struct]:
    return RequestPolicySettings


@hookimpl
def flexserv_preprocess_request(endpoint: str, body: dict[str, Any], context: RequestContext) -> None:
    if endpoint not in GENERATION_ENDPOINTS:
        return
    policy = context.server.settings.get(RequestPolicySettings)
    counters = _counters(context.server)
    cap = policy.request_policy_max_tokens_cap
    if cap is not None:
        given = [f for f in TOKEN_FIELDS if isinstance(body.get(f), int)]
        if not given:
            body["max_tokens"] = cap
        for field in given:
            if body[field] > cap:
                body[field] = cap
                counters.capped += 1
                context.state[CAPPED_KEY] = field
    if policy.request_policy_default_temperature is not None and body.get("temperature") is None:
        body["temperature"] = policy.request_policy_default_temperature
        counters.defaulted += 1


@get("/v1/contrib/request-policy", summary="The request policy and what it changed")
async def request_policy(request: Request[Any, Any, Any]) -> dict[str, Any]:
    server: FlexServer = request.app.state.flexserv
    counters = _counters(server)
    return {
        "policy": msgspec.to_builtins(server.settings.get(RequestPolicySettings)),
        "requests_capped": counters.capped,
        "requests_defaulted": counters.defaulted,
    }


@hookimpl
def flexserv_register_routes(settings: Settings) -> list[Any]:
    return [request_policy]
