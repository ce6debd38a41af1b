"""The core's one merge of chat-template variables and its one reserved-name check."""

from __future__ import annotations

from typing import Any

import pytest

from flexserv_core import InvalidRequest, TemplateVariablesMisconfigured
from flexserv_core.template_variables import merge_template_variables


def test_later_layers_win_defaults_model_plugins_request() -> None:
    defaults = {"a": "default", "b": "default", "c": "default", "d": "default"}
    model = {"b": "model", "c": "model", "d": "model"}
    plugins = {"c": "plugin", "d": "plugin"}
    request = {"d": "request"}
    merged = merge_template_variables(defaults, model, plugins, request, model="m")
    assert merged == {"a": "default", "b": "model", "c": "plugin", "d": "request"}
    assert merge_template_variables(None, None, None, None, model="m") == {}


@pytest.mark.parametrize(
    "key", ["tokenize", "add_generation_prompt", "chat_template", "return_tensors", "sanitize_control_tokens"]
)
def test_a_reserved_name_in_the_request_is_a_400_naming_it(key: str) -> None:
    with pytest.raises(InvalidRequest) as info:
        merge_template_variables({}, {}, {}, {key: False}, model="m")
    assert info.value.param == f"chat_template_kwargs.{key}" and info.value.status_code == 400


@pytest.mark.parametrize("layer", [0, 1, 2])
def test_a_reserved_name_the_server_sets_is_a_server_error_naming_the_layer(layer: int) -> None:
    layers: list[dict[str, Any]] = [{}, {}, {}]
    layers[layer] = {"messages": []}
    with pytest.raises(TemplateVariablesMisconfigured) as info:
        merge_template_variables(*layers, {}, model="tiny")
    assert info.value.status_code == 500 and "'messages'" in info.value.message
    assert ("default", "'tiny'", "plugin")[layer] in info.value.message
