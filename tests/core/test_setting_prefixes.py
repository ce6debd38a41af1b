"""Every first-party plugin's settings carry its prefix (``oom-monitor`` ->
``oom_monitor_*``), so settings cannot clash and ``-p no:NAME`` can recognise a
blocked plugin's settings. Unprefixed aliases are only the FlexServ spec's own
spellings, listed here, so a new one is a decision made in review."""

from __future__ import annotations

import pytest

from flexserv_core import hooks
from flexserv_core.models.defaults import FIRST_PARTY_DISTRIBUTIONS
from flexserv_core.plugin_manager import create_plugin_manager
from flexserv_core.settings import describe_fields, setting_prefix

#: Spellings the FlexServ spec documents, kept as aliases of prefixed settings.
SPEC_ALIASES: dict[str, frozenset[str]] = {
    # the names these settings had while image input was part of the core
    "image-input": frozenset(
        {
            "image_url_hosts",
            "image_url_allow_private",
            "image_max_bytes",
            "image_max_pixels",
            "image_fetch_timeout",
            "image_max_redirects",
        }
    ),
    # the names these settings had while the audio API was part of the core
    "audio": frozenset({"max_audio_bytes", "max_audio_seconds"}),
    # the names these settings had while the embeddings API was part of the core
    "embeddings": frozenset({"max_embedding_inputs", "embedding_truncate"}),
    # the name it had while documents were part of the core
    "ocr": frozenset({"max_document_page_images"}),
    "oom-monitor": frozenset({"oom_ram_threshold", "oom_vram_threshold", "oom_check_interval"}),
    "transformers": frozenset(
        {
            "device",
            "dtype",
            "attn_implementation",
            "trust_remote_code",
            "quantization",
            "default_max_tokens",
            "continuous_batching",
        }
    ),
}


def carries_prefix(name: str, plugin: str) -> bool:
    prefix = setting_prefix(plugin)
    return name == prefix or name.startswith(prefix + "_")


@pytest.fixture(scope="module")
def first_party_settings() -> dict[str, list[tuple[str, tuple[str, ...]]]]:
    """``plugin -> [(name, aliases)]`` for every installed first-party plugin but the core's built-ins."""
    pm = create_plugin_manager()
    settings: dict[str, list[tuple[str, tuple[str, ...]]]] = {}
    for plugin, structs in hooks.settings_by_plugin(pm).items():
        info = pm.infos[plugin]
        if info.builtin or info.distribution not in FIRST_PARTY_DISTRIBUTIONS:
            continue
        settings[plugin] = [(f.name, f.aliases) for struct in structs for f in describe_fields(struct)]
    return settings


def test_the_scan_sees_the_plugins_with_settings(first_party_settings: dict[str, object]) -> None:
    expected = {"classification", "image-input", "oom-monitor", "resources", "sentence-transformers", "template-kwargs"}
    assert expected | {"transformers", "whisper"} <= set(first_party_settings)


def test_every_setting_name_carries_its_plugins_prefix(
    first_party_settings: dict[str, list[tuple[str, tuple[str, ...]]]],
) -> None:
    offenders = [
        f"{plugin}: {name}"
        for plugin, fields in first_party_settings.items()
        for name, _ in fields
        if not carries_prefix(name, plugin)
    ]
    assert offenders == []


def test_unprefixed_aliases_are_only_the_specs_spellings(
    first_party_settings: dict[str, list[tuple[str, tuple[str, ...]]]],
) -> None:
    unprefixed = {
        plugin: {a for _, aliases in fields for a in aliases if not carries_prefix(a, plugin)}
        for plugin, fields in first_party_settings.items()
    }
    assert {plugin: aliases for plugin, aliases in unprefixed.items() if aliases} == SPEC_ALIASES


def test_the_prefix_rule() -> None:
    assert carries_prefix("oom_monitor", "oom-monitor") and carries_prefix("oom_monitor_eviction", "oom-monitor")
    assert not carries_prefix("oom_eviction", "oom-monitor") and not carries_prefix("resourcesx", "resources")
