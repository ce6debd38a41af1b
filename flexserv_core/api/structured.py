"""``response_format``, ``structured_outputs`` and ``logit_bias`` -> :class:`SamplingParams` fields.

Only shapes are checked here (one constraint per request, a schema that is a JSON
object, token ids that are integers in the vocabulary); the backend compiles the
constraint in :meth:`TextGenerationModel.prepare` and answers 400 for one it
cannot enforce. ``structured_outputs`` is FlexServ's extension (vLLM's name and
fields): ``{"json": schema}``, ``{"json_object": true}``, ``{"regex": pattern}``,
``{"choice": [strings]}`` or ``{"grammar": lark}``. vLLM's older spellings of the
same, the top-level ``guided_json``, ``guided_regex``, ``guided_choice`` and
``guided_grammar``, map onto it (:func:`guided_constraint`); errors name them.
"""

from __future__ import annotations

import json
from typing import Any

from flexserv_core.api.text_schemas import LogitBias, ResponseFormat, StructuredOutputs
from flexserv_core.backends.base import Constraint
from flexserv_core.errors import InvalidRequest

__all__ = ["GUIDED_FIELDS", "check_logit_bias", "guided_constraint", "json_schema_constraint", "request_constraint"]

#: vLLM's request fields for structured outputs, before ``structured_outputs``.
GUIDED_FIELDS = ("guided_json", "guided_regex", "guided_choice", "guided_grammar")


def json_schema_constraint(schema: Any, param: str) -> Constraint:
    if isinstance(schema, bool):
        schema = {} if schema else {"not": {}}
    if not isinstance(schema, dict):
        raise InvalidRequest("A JSON schema must be an object.", param=param)
    # not sorted: the schema's key order is the order the output's keys come in
    return Constraint(kind="json_schema", spec=json.dumps(schema), param=param)


def _response_format(fmt: ResponseFormat) -> Constraint | None:
    if fmt.type == "text":
        return None
    if fmt.type == "json_object":
        return Constraint(kind="json_object", param="response_format")
    if fmt.json_schema is None:
        raise InvalidRequest(
            "'response_format' of type 'json_schema' needs a 'json_schema' object.", param="response_format.json_schema"
        )
    schema = fmt.json_schema.schema if fmt.json_schema.schema is not None else {}
    return json_schema_constraint(schema, "response_format.json_schema.schema")


def _structured_outputs(so: StructuredOutputs) -> Constraint:
    given = [name for name in ("json", "json_object", "regex", "choice", "grammar") if getattr(so, name) is not None]
    if so.json_object is False:
        given.remove("json_object")
    if len(given) != 1:
        raise InvalidRequest(
            "'structured_outputs' takes exactly one of 'json', 'json_object', 'regex', 'choice', 'grammar'"
            f" (got {', '.join(given) or 'none'}).",
            param="structured_outputs",
        )
    name = given[0]
    param = f"structured_outputs.{name}"
    if name == "json":
        return json_schema_constraint(so.json, param)
    if name == "json_object":
        return Constraint(kind="json_object", param=param)
    if name == "regex":
        return Constraint(kind="regex", spec=so.regex or "", param=param)
    if name == "choice":
        return Constraint(kind="choice", spec=json.dumps(so.choice), param=param)
    return Constraint(kind="grammar", spec=so.grammar or "", param=param)


def guided_constraint(body: Any) -> Constraint | None:
    """The constraint of a request's ``guided_*`` fields (``body``: a chat or
    completions request), if it sets one; setting several is a 400."""
    given = [name for name in GUIDED_FIELDS if getattr(body, name, None) is not None]
    if not given:
        return None
    if len(given) > 1:
        raise InvalidRequest(
            f"Send only one of {', '.join(repr(n) for n in GUIDED_FIELDS)} (got {', '.join(given)}).",
            param=given[1],
        )
    name = given[0]
    value = getattr(body, name)
    if name == "guided_json":
        if isinstance(value, str):  # vLLM takes the schema as JSON text too
            try:
                value = json.loads(value)
            except ValueError as exc:
                raise InvalidRequest(f"'guided_json' is a string but not JSON: {exc}.", param=name) from None
        return json_schema_constraint(value, name)
    if name == "guided_regex":
        return Constraint(kind="regex", spec=value, param=name)
    if name == "guided_choice":
        return Constraint(kind="choice", spec=json.dumps(value), param=name)
    return Constraint(kind="grammar", spec=value, param=name)


def request_constraint(
    response_format: ResponseFormat | None,
    structured_outputs: StructuredOutputs | None,
    guided: Constraint | None = None,
) -> Constraint | None:
    """The request's output constraint, if any: from ``response_format``,
    ``structured_outputs`` or the ``guided_*`` fields (``guided``, see
    :func:`guided_constraint`); two of them at once is a 400."""
    from_format = _response_format(response_format) if response_format is not None else None
    if guided is not None:
        if structured_outputs is not None or from_format is not None:
            other = "structured_outputs" if structured_outputs is not None else "response_format"
            raise InvalidRequest(f"Use either '{other}' or '{guided.param}', not both.", param=guided.param)
        return guided
    if structured_outputs is None:
        return from_format
    if from_format is not None:
        raise InvalidRequest(
            "Use either 'response_format' or 'structured_outputs', not both.", param="structured_outputs"
        )
    return _structured_outputs(structured_outputs)


def check_logit_bias(bias: LogitBias | None, vocab_size: int | None) -> dict[int, float] | None:
    """OpenAI's string-keyed map -> token ids; keys must be ids in the vocabulary."""
    if not bias:
        return None
    out: dict[int, float] = {}
    for key, value in bias.items():
        try:
            token = int(key)
        except ValueError:
            token = -1
        if token < 0 or (vocab_size is not None and token >= vocab_size) or str(token) != key.strip():
            bound = f" in [0, {vocab_size})" if vocab_size is not None else ""
            raise InvalidRequest(
                f"Invalid logit_bias key {key!r}: keys must be token ids{bound}.", param=f"logit_bias.{key}"
            )
        if not -100.0 <= value <= 100.0:
            raise InvalidRequest(
                f"Invalid logit_bias value {value} for token {key}: values must be in [-100, 100].",
                param=f"logit_bias.{key}",
            )
        out[token] = float(value)
    return out
