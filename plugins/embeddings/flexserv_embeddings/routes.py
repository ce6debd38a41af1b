"""``POST /v1/embeddings``: OpenAI's embeddings endpoint over any embedding backend.

The route validates and normalises the request, takes the model from the
registry (so embedding models are listed, loaded once, unloadable, and evicted by
TTL/OOM like text models), and shapes the answer. Batching of concurrent
requests is the backend's job (see ``EmbeddingModel.embed``). ``-p no:embeddings``
removes the route (404).
"""

from __future__ import annotations

import base64
import logging
import math
import time
from typing import Any

import numpy as np
from litestar import Request, post

from flexserv_core import (
    ContextLengthExceeded,
    FlexServer,
    InvalidRequest,
    Refusals,
    UnsupportedParameter,
    open_request_context,
    parse_body,
    until_disconnect,
)
from flexserv_embeddings.metrics import embedding_counters
from flexserv_embeddings.model import EmbeddingLimits, EmbeddingModel
from flexserv_embeddings.schemas import EmbeddingInput, EmbeddingRequest, EmbeddingResponse, EmbeddingSettings

ENDPOINT = "/v1/embeddings"

log = logging.getLogger(__name__)

#: vLLM's extensions of this endpoint that would change the vectors: sent with a value
#: other than the neutral one, a 400 naming them, not a drop with a warning.
UNSUPPORTED: Refusals = {
    "truncate_prompt_tokens": (
        lambda v: v is None,
        "inputs are cut at the model's maximum (or refused under --no-embeddings-truncate)",
    ),
    "normalize": (lambda v: v is None or v is True, "vectors are always L2-normalised"),
    "add_special_tokens": (lambda v: v is None or v is True, "the model's special tokens are always added"),
    "embed_dtype": (lambda v: v is None or v == "float32", "vectors are float32"),
}


def normalise_input(value: EmbeddingInput, *, max_inputs: int) -> list[str] | list[list[int]]:
    """One list of texts or one list of token-id lists; raises 400 with ``param="input"``."""
    if isinstance(value, str):
        value = [value]
    if not value:
        raise InvalidRequest("'input' must not be empty: send a string, a list of strings or token ids.", param="input")
    items: list[Any]
    if all(isinstance(v, int) for v in value):
        items = [list(value)]
    elif all(isinstance(v, str) for v in value) or all(isinstance(v, list) for v in value):
        items = list(value)
    else:
        raise InvalidRequest(
            "'input' must be a string, a list of strings, a list of token ids or a list of token-id lists, not a mix.",
            param="input",
        )
    if len(items) > max_inputs:
        raise InvalidRequest(
            f"'input' has {len(items)} items; this server accepts at most {max_inputs} per request (--embeddings-max-inputs).",
            param="input",
            code="too_many_inputs",
        )
    for i, item in enumerate(items):
        if not item:
            kind = "string" if isinstance(item, str) else "token list"
            raise InvalidRequest(f"'input[{i}]' is an empty {kind}; every input must have content.", param="input")
        if isinstance(item, list) and any(t < 0 for t in item):
            raise InvalidRequest(f"'input[{i}]' contains a negative token id.", param="input")
    return items


def check_token_inputs(
    inputs: list[str] | list[list[int]], limits: EmbeddingLimits, model: str, *, truncate: bool
) -> None:
    """Token-id inputs against the model's declared limits (texts are the backend's to
    measure: only its tokenizer knows their length)."""
    if not inputs or isinstance(inputs[0], str):
        return  # one kind per request (normalise_input)
    for i, item in enumerate(inputs):
        highest = max(item, default=-1)
        if limits.vocab_size is not None and highest >= limits.vocab_size:
            raise InvalidRequest(
                f"'input[{i}]' contains token id {highest}, outside the vocabulary of model '{model}' "
                f"({limits.vocab_size} ids).",
                param="input",
                code="invalid_value",
            )
        if not truncate and len(item) > limits.max_input_tokens:
            raise ContextLengthExceeded(
                f"'input[{i}]' is {len(item)} tokens long; model '{model}' accepts at most "
                f"{limits.max_input_tokens} and truncation is off (--no-embeddings-truncate).",
                param="input",
            )


def check_dimensions(requested: int | None, model: EmbeddingModel, name: str) -> None:
    """``dimensions`` the model can answer: its own size, or a size it was trained to be cut to."""
    size = model.dimensions
    if requested is None or requested == size:
        return
    if requested > size:
        raise InvalidRequest(
            f"'dimensions' is {requested}, but model '{name}' produces {size}-dimensional embeddings.",
            param="dimensions",
            code="invalid_value",
        )
    if not model.is_matryoshka:
        raise UnsupportedParameter(
            f"'dimensions' below {size} is not supported by model '{name}': it was not trained for shortened "
            f"(Matryoshka) embeddings. Omit 'dimensions' or send {size}.",
            param="dimensions",
        )
    sizes = model.matryoshka_dimensions
    if sizes is not None and requested not in sizes:
        raise InvalidRequest(
            f"'dimensions' is {requested}; model '{name}' was trained for {', '.join(map(str, sorted(sizes)))}.",
            param="dimensions",
            code="invalid_value",
        )


def _shape_vector(vector: list[float], dimensions: int | None, encoding: str) -> list[float] | str:
    if encoding == "float" and (dimensions is None or dimensions >= len(vector)):
        return vector  # already the floats to send: no round trip through an array on the event loop
    arr = np.asarray(vector, dtype=np.float32)
    if dimensions is not None and dimensions < arr.shape[0]:
        arr = arr[:dimensions]
        norm = float(np.linalg.norm(arr))
        if norm > 0 and math.isfinite(norm):
            arr = arr / norm
    if encoding == "base64":
        return base64.b64encode(arr.astype("<f4").tobytes()).decode("ascii")
    values: list[float] = arr.tolist()
    return values


@post(
    ENDPOINT,
    status_code=200,
    summary="Create embeddings",
    opt={"body": EmbeddingRequest, "response": EmbeddingResponse, "scope": "inference"},
)
async def create_embeddings(request: Request[Any, Any, Any]) -> dict[str, Any]:
    started = time.perf_counter()
    server: FlexServer = request.app.state.flexserv
    limits = server.settings.get(EmbeddingSettings)
    body = await parse_body(request, EmbeddingRequest, open_request_context(request, ENDPOINT))
    inputs = normalise_input(body.input, max_inputs=limits.embeddings_max_inputs)
    truncate = limits.embeddings_truncate
    async with server.registry.acquire(body.model, EmbeddingModel) as lease:
        model = lease.model
        check_dimensions(body.dimensions, model, lease.spec.name)
        check_token_inputs(inputs, model.limits, lease.spec.name, truncate=truncate)
        result = await until_disconnect(request, model.embed(inputs, truncate=truncate))
        name = lease.spec.name
    counters = embedding_counters(server.settings)
    counters.inputs.labels(name).inc(len(inputs))
    counters.tokens.labels(name).inc(result.prompt_tokens)
    log.info(
        "embeddings done: model %s, %d input(s), %d tokens in %.2f s",
        name,
        len(inputs),
        result.prompt_tokens,
        time.perf_counter() - started,
    )
    data = [
        {"object": "embedding", "index": i, "embedding": _shape_vector(v, body.dimensions, body.encoding_format)}
        for i, v in enumerate(result.vectors)
    ]
    usage = {"prompt_tokens": result.prompt_tokens, "total_tokens": result.prompt_tokens}
    return {"object": "list", "data": data, "model": name, "usage": usage}


ROUTES = [create_embeddings]
