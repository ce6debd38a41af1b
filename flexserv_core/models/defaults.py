"""The rule that picks the default model of each kind; no installation order changes it.

For each kind, the first of these that has a model is the default:

1. the user's ``--default-model`` / ``--default-embedding-model`` /
   ``--default-transcription-model`` (command line, environment or config file);
2. a model offered by a **first-party** plugin (a distribution of this project,
   :data:`FIRST_PARTY_DISTRIBUTIONS`, or a built-in);
3. the first model of that kind the user configured (``--model``, ``[[models]]``);
4. a model offered by a **third-party** plugin, only when nothing above offers one.
   If several third-party plugins offer one, the plugin whose name sorts first
   wins and a warning names the others and the setting that chooses.

Within one plugin, the first model of a kind in its returned list is preferred.
Offers with ``may_be_default=False`` are served by name and never become a
default. Pluggy's call order (``tryfirst``/``trylast``, registration order) plays
no part: entry points are discovered in an order that depends on how packages
happen to be installed.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Mapping, Sequence
from typing import NamedTuple

from flexserv_core.models.spec import ModelKind, ModelSpec

log = logging.getLogger(__name__)

#: Distributions of this project whose offered models rank above configured and
#: third-party ones. A test keeps it in step with ``plugins/*/pyproject.toml``.
FIRST_PARTY_DISTRIBUTIONS: frozenset[str] = frozenset(
    {
        "flexserv-core",
        "flexserv-anomaly",
        "flexserv-audio",
        "flexserv-bench",
        "flexserv-classification",
        "flexserv-constraints",
        "flexserv-image-input",
        "flexserv-llamacpp",
        "flexserv-oom-monitor",
        "flexserv-playground",
        "flexserv-ray",
        "flexserv-resources",
        "flexserv-responses",
        "flexserv-sentence-transformers",
        "flexserv-state-postgres",
        "flexserv-state-sqlite",
        "flexserv-template-kwargs",
        "flexserv-transformers",
        "flexserv-whisper",
        "flexserv-torch",
        "flexserv-batching",
        "flexserv-chat-templates",
        "flexserv-tokenize",
        "flexserv-tool-parsers",
        "flexserv-scaffold",
        "flexserv-ocr",
        "flexserv-files",
        "flexserv-docs",
        "flexserv-embeddings",
        "flexserv-state",
        "flexserv-load-times",
    }
)

#: The setting that names the default of each of the core's kinds.
DEFAULT_SETTING_FLAGS: dict[str, str] = {
    ModelKind.TEXT: "--default-model",
    ModelKind.EMBEDDING: "--default-embedding-model",
    ModelKind.TRANSCRIPTION: "--default-transcription-model",
}


class ModelOffer(NamedTuple):
    """A model a plugin offered through ``flexserv_default_models``."""

    spec: ModelSpec
    plugin: str
    first_party: bool


def is_first_party(distribution: str | None, builtin: bool = False) -> bool:
    return builtin or distribution in FIRST_PARTY_DISTRIBUTIONS


def _first_by_plugin(offers: Iterable[ModelOffer], kind: str) -> list[ModelOffer]:
    """The first default candidate of ``kind`` of each plugin, plugins sorted by name."""
    firsts: dict[str, ModelOffer] = {}
    for offer in offers:
        if offer.spec.kind == kind and offer.spec.may_be_default:
            firsts.setdefault(offer.plugin, offer)
    return [firsts[name] for name in sorted(firsts)]


def pick_defaults(
    user: Mapping[str, str],
    offers: Sequence[ModelOffer],
    configured: Sequence[ModelSpec],
) -> dict[str, str]:
    """Kind -> default model name, by the rule of this module.

    ``user`` holds the names the default-model settings chose (kind -> name).
    """
    defaults = dict(user)
    kinds = dict.fromkeys([*(o.spec.kind for o in offers), *(s.kind for s in configured)])
    for kind in kinds:
        if kind in defaults:
            continue
        first_party = _first_by_plugin((o for o in offers if o.first_party), kind)
        if first_party:
            defaults[kind] = first_party[0].spec.name
            continue
        mine = next((s for s in configured if s.kind == kind), None)
        if mine is not None:
            defaults[kind] = mine.name
            continue
        third_party = _first_by_plugin((o for o in offers if not o.first_party), kind)
        if not third_party:
            continue
        chosen = third_party[0]
        defaults[kind] = chosen.spec.name
        if len(third_party) > 1:
            others = ", ".join(f"'{o.spec.name}' (plugin {o.plugin})" for o in third_party[1:])
            flag = DEFAULT_SETTING_FLAGS.get(kind, "a [[models]] table and the request's model field")
            log.warning(
                "several plugins offer a default %s model: using '%s' (plugin %s, first by plugin name), not %s; "
                "choose one with %s",
                kind,
                chosen.spec.name,
                chosen.plugin,
                others,
                flag,
            )
    return defaults
