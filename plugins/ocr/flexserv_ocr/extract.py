"""``POST /v1/documents/extract``: a document and a JSON schema in, JSON that validates out.

FlexServ's own design (the source runtime used Donut/LayoutLM checkpoints from
the Hub): the document is read as text (text layer or OCR, with page markers),
and the local chat model writes the JSON under constrained decoding with the
schema, so the output always parses and validates. Each value is then looked up
in the pages' text to say which page it came from (``null`` when the model wrote
a value the document does not contain: a hint that it is made up).
"""

from __future__ import annotations

import re
from typing import Any

import msgspec
from litestar import Request, post

from flexserv_core import (
    Constraint,
    ContextLengthExceeded,
    InvalidRequest,
    SamplingParams,
    TextGenerationModel,
    open_request_context,
    parse_body,
    prepare_params,
    until_disconnect,
)
from flexserv_ocr.documents import marked_text, read_reference
from flexserv_ocr.reader import ReadDocument, ReadOptions

EXTRACT_ENDPOINT = "/v1/documents/extract"
DEFAULT_MAX_TOKENS = 1024
SYSTEM_PROMPT = (
    "You extract facts from documents. Answer with one JSON object that follows the schema. "
    "Copy each value exactly as it is written in the document. Use null when the document does not say."
)


class ExtractRequest(msgspec.Struct, kw_only=True):
    #: The JSON schema of the answer (an object schema).
    schema: dict[str, Any]
    file_id: str | None = None
    #: The document inline: base64 or a ``data:`` URL (PDF or image).
    file_data: str | None = None
    #: The chat model that writes the JSON (default: the server's default text model).
    model: str | None = None
    #: The OCR model for pages without a text layer (default: the default OCR model).
    ocr_model: str | None = None
    pages: list[int] | str | None = None
    dpi: int | None = None
    force_ocr: bool = False
    #: More guidance for the model, added to the prompt.
    instructions: str | None = None
    max_tokens: int | None = None


def check_schema(schema: dict[str, Any]) -> str:
    import jsonschema

    try:
        jsonschema.Draft202012Validator.check_schema(schema)
    except jsonschema.SchemaError as exc:
        raise InvalidRequest(f"'schema' is not a valid JSON schema: {exc.message}", param="schema") from None
    if schema.get("type") != "object":
        raise InvalidRequest('\'schema\' must describe a JSON object ("type": "object").', param="schema")
    return msgspec.json.encode(bounded(schema)).decode()


#: Longest string and array the model may write where the schema sets no bound: a
#: small model under a schema with unbounded strings can keep writing one string
#: until max_tokens runs out, and an answer cut off is no answer.
MAX_STRING = 100
MAX_ITEMS = 50
_SUBSCHEMAS = ("anyOf", "oneOf", "allOf")


def bounded(schema: Any) -> Any:
    """``schema`` with ``maxLength``/``maxItems`` added where it sets none: every answer
    that matches it matches ``schema`` too, and it always ends."""
    if isinstance(schema, list):
        return [bounded(item) for item in schema]
    if not isinstance(schema, dict):
        return schema
    out = {key: bounded(value) if key in _SUBSCHEMAS or key == "items" else value for key, value in schema.items()}
    for key in ("properties", "$defs", "definitions"):
        if isinstance(schema.get(key), dict):
            out[key] = {name: bounded(sub) for name, sub in schema[key].items()}
    if isinstance(schema.get("additionalProperties"), dict):
        out["additionalProperties"] = bounded(schema["additionalProperties"])
    types = schema.get("type")
    types = types if isinstance(types, list) else [types]
    unconstrained = not any(key in schema for key in ("enum", "const", "pattern", "format"))
    if "string" in types and unconstrained and "maxLength" not in schema:
        out["maxLength"] = MAX_STRING
    if "array" in types and "maxItems" not in schema:
        out["maxItems"] = MAX_ITEMS
    return out


def prompt_messages(doc: ReadDocument, schema_text: str, instructions: str | None) -> list[dict[str, Any]]:
    user = f"Document:\n{marked_text(doc)}\n\nJSON schema of the answer:\n{schema_text}"
    if instructions:
        user += f"\n\n{instructions}"
    return [{"role": "system", "content": SYSTEM_PROMPT}, {"role": "user", "content": user}]


def _norm(text: str) -> str:
    """Casefolded, whitespace runs as one space, without punctuation at the ends."""
    return re.sub(r"\s+", " ", text).strip().strip(".,;:!?\"'()[]").casefold()


def sources(value: Any, doc: ReadDocument, path: str = "") -> list[dict[str, Any]]:
    """For every scalar in ``value``: its JSON pointer, and the first page whose text contains it."""
    if isinstance(value, dict):
        return [s for key, item in value.items() for s in sources(item, doc, f"{path}/{key}")]
    if isinstance(value, list):
        return [s for i, item in enumerate(value) for s in sources(item, doc, f"{path}/{i}")]
    if value is None or isinstance(value, bool):
        return []
    needle = _norm(str(value))
    if isinstance(value, float) and value.is_integer():
        needle = _norm(str(int(value)))
    page = next((n for p, n in zip(doc.pages, doc.numbers, strict=True) if needle and needle in _norm(p.text)), None)
    return [{"path": path, "value": value, "page": page}]


def checked_prompt(
    model: TextGenerationModel, doc: ReadDocument, schema_text: str, instructions: str | None, max_tokens: int
) -> list[int]:
    """The prompt's tokens; a 400 ``context_length_exceeded`` when they and ``max_tokens``
    are more than the model's context, naming what overflows it: ``instructions`` when the
    prompt without them would fit, else the document (``pages``)."""
    ids = model.render_chat(prompt_messages(doc, schema_text, instructions), {})
    context = model.limits.context_length
    if len(ids) + max_tokens <= context:
        return ids
    if instructions:
        without = model.render_chat(prompt_messages(doc, schema_text, None), {})
        if len(without) + max_tokens <= context:
            raise ContextLengthExceeded(
                f"The 'instructions' take {len(ids) - len(without)} tokens; with the document, the schema and "
                f"'max_tokens' {max_tokens} that is more than model '{model.spec.name}''s context of {context}. "
                "Send shorter 'instructions'.",
                param="instructions",
            )
    raise ContextLengthExceeded(
        f"The document and schema take {len(ids)} tokens; with 'max_tokens' {max_tokens} that is more than "
        f"model '{model.spec.name}''s context of {context}. Select fewer 'pages'.",
        param="pages",
    )


async def generate_json(
    request: Request[Any, Any, Any],
    model: TextGenerationModel,
    prompt_ids: list[int],
    schema_text: str,
    max_tokens: int,
) -> tuple[str, str, int, int]:
    """Constrained generation: ``(text, finish_reason, prompt_tokens, completion_tokens)``."""
    params = SamplingParams(
        max_tokens=max_tokens,
        temperature=0.0,
        constraint=Constraint(kind="json_schema", spec=schema_text, param="schema"),
    )
    # the platform's compiler (the constraints plugin) compiles the schema; the backend checks
    params = await prepare_params(model, params, constraints=request.app.state.flexserv.constraints)

    async def run() -> tuple[str, str, int]:
        parts, finish, count = [], "length", 0
        stream = model.generate(prompt_ids, params)
        try:
            async for delta in stream:
                parts.append(delta.text)
                count += 1
                if delta.finish_reason is not None:
                    finish = delta.finish_reason
        finally:
            await stream.aclose()  # type: ignore[attr-defined]
        return "".join(parts), finish, count

    text, finish, count = await until_disconnect(request, run())
    return text, finish, len(prompt_ids), count


@post(
    EXTRACT_ENDPOINT,
    status_code=200,
    summary="Extract JSON from a document",
    opt={"body": ExtractRequest, "scope": "inference"},
)
async def extract(request: Request[Any, Any, Any]) -> dict[str, Any]:
    import jsonschema

    server = request.app.state.flexserv
    body = await parse_body(request, ExtractRequest, open_request_context(request, EXTRACT_ENDPOINT))
    schema_text = check_schema(body.schema)
    if body.max_tokens is not None and not 1 <= body.max_tokens <= 4096:
        raise InvalidRequest("'max_tokens' must be between 1 and 4096.", param="max_tokens")
    reference = {k: v for k, v in (("file_id", body.file_id), ("file_data", body.file_data)) if v is not None}
    if len(reference) != 1:
        raise InvalidRequest("Send exactly one of 'file_id' or 'file_data'.", param="file_id", code="invalid_input")
    options = ReadOptions(pages=body.pages, dpi=body.dpi, force_ocr=body.force_ocr)
    # param "": the reference is the body itself, so errors name its 'file_id' or 'file_data'
    doc, ocr_name = await read_reference(request, reference, options=options, ocr_model=body.ocr_model, param="")
    max_tokens = body.max_tokens or DEFAULT_MAX_TOKENS
    async with server.registry.acquire(body.model, TextGenerationModel) as lease:
        prompt = checked_prompt(lease.model, doc, schema_text, body.instructions, max_tokens)
        text, finish, prompt_tokens, completion_tokens = await generate_json(
            request, lease.model, prompt, schema_text, max_tokens
        )
        model_name = lease.spec.name
    try:
        data = msgspec.json.decode(text)
        jsonschema.validate(data, body.schema)
    except (msgspec.DecodeError, jsonschema.ValidationError):
        raise InvalidRequest(
            f"The model's answer was cut off at {completion_tokens} tokens before the JSON was complete "
            "(finish_reason 'length'): raise 'max_tokens' or ask for fewer fields."
            if finish == "length"
            else "The model's answer did not validate against the schema.",
            param="max_tokens",
            code="extraction_incomplete",
        ) from None
    return {
        "object": "document.extraction",
        "model": model_name,
        "ocr_model": ocr_name if any(p.source == "ocr" for p in doc.pages) else None,
        "data": data,
        "sources": sources(data, doc),
        "pages": [{"page": n, "source": p.source} for p, n in zip(doc.pages, doc.numbers, strict=True)],
        "usage": {
            "prompt_tokens": prompt_tokens,
            "completion_tokens": completion_tokens,
            "total_tokens": prompt_tokens + completion_tokens,
            "pages": len(doc.pages),
        },
    }
