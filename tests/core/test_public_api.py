"""The public plugin API: ``flexserv_core`` and ``flexserv_core.testing`` are the
only core modules plugins may import, and their ``__all__`` is pinned here."""

from __future__ import annotations

import ast
import importlib
import subprocess
import sys
import tomllib
import types
from pathlib import Path

import pytest

import flexserv_core
import flexserv_core.testing

ROOT = Path(__file__).resolve().parents[2]
PLUGIN_DIRS = sorted(p for group in ("plugins", "contrib") for p in (ROOT / group).iterdir() if p.is_dir())


@pytest.mark.parametrize("module", [flexserv_core, flexserv_core.testing], ids=lambda m: m.__name__)
def test_all_is_sorted_and_matches_the_namespace(module: types.ModuleType) -> None:
    public = [
        name
        for name, value in vars(module).items()
        if (not name.startswith("_") or name == "__version__") and not isinstance(value, types.ModuleType)
    ]
    public += [name for name in getattr(module, "_LAZY", {}) if name not in public]  # imported on first use
    # ruff (RUF022) keeps __all__ sorted; here it must list exactly the public namespace, once each.
    assert len(set(module.__all__)) == len(module.__all__)
    assert set(module.__all__) == set(public)
    for name in module.__all__:
        assert getattr(module, name) is not None


def test_facade_has_what_plugins_need() -> None:
    # The names the platform design promises plugins; removing one breaks them.
    promised = {
        "hookimpl", "hookspec", "PROJECT_NAME", "Backend", "LoadedModel", "TextGenerationModel",
        "SamplingParams", "TokenDelta", "TopLogprob", "FinishReason", "ProgressCallback",
        "RESERVED_TEMPLATE_KWARGS", "ModelSpec", "ModelKind", "RequestContext", "FlexServer", "Stash",
        "StashKey", "Settings", "default_cache_dir", "ModelEvent", "ModelEventType", "EvictionReason",
        "FlexServError", "InvalidRequest",
        "ContextLengthExceeded", "NotFound", "ModelNotFound", "PayloadTooLarge", "TooManyRequests",
        "ServiceUnavailable", "ModelLoadError", "UsageError", "__version__",
        # the state store is the state plugin's (flexserv_state); its errors and request ownership stay
        "StateUnavailable", "QuotaExceeded", "request_owner", "request_reads_any_owner",
        # a distribution that owns hooks calls them under the core's policy (flexserv-state, flexserv-resources)
        "call_hook", "hook_error",
        # tool calling's seam (the tool-parsers plugin serves it; ToolPlan is what Responses streams)
        "ToolCalling", "ToolCallStreamer",
        # a text route outside the core (the Responses API plugin)
        "TextSession", "check_chat_request", "ChatCompletionRequest", "ResponseFormat", "JsonSchemaFormat",
        "Tool", "FunctionDefinition", "ToolChoice", "NamedToolChoice", "NamedFunction", "ToolCallDelta",
        "ToolPlan", "sse_event", "sse_response", "error_event", "SSE_DONE", "READY", "SSEGenerator", "convert_param", "parse_body",
    }  # fmt: skip
    assert promised <= set(flexserv_core.__all__)
    testing = {"make_app", "app_client", "running_app_client", "openai_client", "make_plugin_manager",
               "make_settings", "FakeTextBackend", "ServedApp", "free_port", "wait_healthy"}  # fmt: skip
    assert testing <= set(flexserv_core.testing.__all__)


def test_every_error_class_is_public() -> None:
    errors = importlib.import_module("flexserv_core.errors")
    classes = {n for n, v in vars(errors).items() if isinstance(v, type) and issubclass(v, BaseException)}
    assert classes <= set(flexserv_core.__all__)


@pytest.mark.slow
def test_import_is_cheap() -> None:
    code = "import sys, flexserv_core; print(','.join(m for m in ('torch', 'transformers', 'litestar') if m in sys.modules))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.strip()
    assert out == "", f"import flexserv_core pulled in {out}"


def test_the_core_imports_only_what_it_declares() -> None:
    """The kernel's source (the testing kit aside) imports the standard library, itself
    and its declared dependencies only; what a feature needs (Pillow, jinja2,
    llguidance, ...) belongs to the plugin or library that declares it."""
    import importlib.metadata
    import re

    declared = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["dependencies"]
    dists = {re.split(r"[<>=!~\[ ;]", d, maxsplit=1)[0].lower().replace("_", "-") for d in declared}
    allowed = {"flexserv_core"} | set(sys.stdlib_module_names)
    for module, owners in importlib.metadata.packages_distributions().items():
        if any(o.lower().replace("_", "-") in dists for o in owners):
            allowed.add(module)
    found: dict[str, str] = {}
    for path in (ROOT / "flexserv_core").rglob("*.py"):
        if "testing" in path.relative_to(ROOT / "flexserv_core").parts:
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            names = [a.name for a in node.names] if isinstance(node, ast.Import) else []
            if isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                names = [node.module]
            for name in names:
                found.setdefault(name.split(".")[0], str(path.relative_to(ROOT)))
    assert {m: f for m, f in found.items() if m not in allowed} == {}
    assert not dists & {"pillow", "jinja2", "llguidance", "httpcore", "pyyaml", "swagger-ui-bundle"}
    # and every declared dependency is one the kernel imports (the testing kit's own,
    # such as httpx, are the [testing] extra's)
    owners = importlib.metadata.packages_distributions()
    imported = {o.lower().replace("_", "-") for module in found for o in owners.get(module, [])}
    assert dists - imported == set()


def _is_package_module(plugin_dir: Path, path: Path) -> bool:
    """Inside the distribution's import package (not its tests or scripts)."""
    top = path.relative_to(plugin_dir).parts[0]
    return top != "tests" and (plugin_dir / top / "__init__.py").is_file()


#: First-party libraries a plugin may import (their ``__all__``) when its distribution
#: depends on them: shared code that is not the core's, like the torch helpers and the micro-batcher.
SHARED_LIBRARIES = {
    "flexserv-torch": ("flexserv_torch", ROOT / "plugins" / "torch-support" / "flexserv_torch"),
    "flexserv-batching": ("flexserv_batching", ROOT / "plugins" / "batching" / "flexserv_batching"),
    # the sandboxed chat-template renderer of the text backends (jinja2 stays out of the core)
    "flexserv-chat-templates": (
        "flexserv_chat_templates",
        ROOT / "plugins" / "chat-templates" / "flexserv_chat_templates",
    ),
    # a plugin (/v1/embeddings) that is also the library of embedding backends (EmbeddingModel)
    "flexserv-embeddings": ("flexserv_embeddings", ROOT / "plugins" / "embeddings" / "flexserv_embeddings"),
    # a plugin (the audio routes) that is also the library of transcription backends (TranscriptionModel)
    "flexserv-audio": ("flexserv_audio", ROOT / "plugins" / "audio" / "flexserv_audio"),
    # a plugin (the resources route, the probes) that is also the library of hardware readings and owns their hook
    "flexserv-resources": ("flexserv_resources", ROOT / "plugins" / "resources" / "flexserv_resources"),
    # a plugin (the server's store, --state-url) that is also the library of what keeps records and of
    # state backends (StateStore, Collection, StateBackend and its contract)
    "flexserv-state": ("flexserv_state", ROOT / "plugins" / "state" / "flexserv_state"),
    # a plugin (the constraint compiler) that is also the library of the backend half of constrained
    # decoding (ConstraintVocabulary, TokenMatcher, fill_blocked_masks)
    "flexserv-constraints": ("flexserv_constraints", ROOT / "plugins" / "constraints" / "flexserv_constraints"),
    # a plugin (tool calling) that is also the library of tool-call formats (ToolParser) and owns their hook
    "flexserv-tool-parsers": ("flexserv_tool_parsers", ROOT / "plugins" / "tool-parsers" / "flexserv_tool_parsers"),
}


def _public_names(package_dir: Path, module: str = "__init__") -> set[str]:
    """A package's (or its ``module``'s) ``__all__``, read from its source (the core's tests do not import it)."""
    source = package_dir / f"{module}.py"
    if not source.is_file():
        return set()
    for node in ast.parse(source.read_text()).body:
        if isinstance(node, ast.Assign) and any(getattr(t, "id", None) == "__all__" for t in node.targets):
            return set(ast.literal_eval(node.value))
    return set()


def _shared_libraries(plugin_dir: Path) -> dict[str, set[str]]:
    """The shared libraries ``plugin_dir``'s distribution depends on (and so may import)."""
    pyproject = plugin_dir / "pyproject.toml"
    if not pyproject.is_file():
        return {}
    dependencies = tomllib.loads(pyproject.read_text()).get("project", {}).get("dependencies", [])
    names = {dep.split(";")[0].split("[")[0].split(">")[0].split("=")[0].split("<")[0].strip() for dep in dependencies}
    return {module: _public_names(path) for dist, (module, path) in SHARED_LIBRARIES.items() if dist in names}


def _violations(plugin_dir: Path, path: Path) -> list[str]:
    allowed = {"flexserv_core": set(flexserv_core.__all__), **_shared_libraries(plugin_dir)}
    if not _is_package_module(plugin_dir, path):
        allowed["flexserv_core.testing"] = set(flexserv_core.testing.__all__)
        # tests run where every first-party distribution is installed: any shared library's test kit
        for module, package_dir in SHARED_LIBRARIES.values():
            if kit := _public_names(package_dir, "testing"):
                allowed[f"{module}.testing"] = kit
    found = []
    for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
        if isinstance(node, ast.Import):
            modules = [(a.name, None) for a in node.names]
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            modules = [(node.module, [a.name for a in node.names])]
        else:
            continue
        for module, names in modules:
            top = module.split(".")[0]
            if top not in ("flexserv_core", *(m for m, _ in SHARED_LIBRARIES.values())) or (plugin_dir / top).is_dir():
                continue
            where = f"{path.relative_to(ROOT)}:{node.lineno}"
            if module not in allowed:
                found.append(f"{where} imports {module}; use one of {sorted(allowed)}")
                continue
            for name in names or ():
                if name not in allowed[module]:
                    found.append(f"{where} imports {name} from {module}, which does not export it")
    return found


@pytest.mark.parametrize("plugin_dir", PLUGIN_DIRS, ids=lambda p: f"{p.parent.name}/{p.name}")
def test_plugins_import_only_the_public_api(plugin_dir: Path) -> None:
    files = [p for p in plugin_dir.rglob("*.py") if not {"build", ".venv"} & set(p.parts)]
    assert files
    problems = [v for f in files for v in _violations(plugin_dir, f)]
    assert not problems, "\n".join(problems)


def test_the_import_rule_catches_a_deep_import(tmp_path: Path) -> None:
    plugin = tmp_path / "demo"
    (plugin / "flexserv_demo").mkdir(parents=True)
    (plugin / "flexserv_demo" / "__init__.py").write_text("")
    (plugin / "tests").mkdir()
    bad_pkg = plugin / "flexserv_demo" / "plugin.py"
    bad_pkg.write_text("from flexserv_core.testing import make_app\nfrom flexserv_core import hooks\n")
    good_test = plugin / "tests" / "test_demo.py"
    good_test.write_text("from flexserv_core.testing import make_app\nimport flexserv_core\n")
    global ROOT
    saved, ROOT = ROOT, tmp_path
    try:
        assert len(_violations(plugin, bad_pkg)) == 2
        assert _violations(plugin, good_test) == []
    finally:
        ROOT = saved


def test_a_shared_library_is_importable_only_by_its_dependents(tmp_path: Path) -> None:
    plugin = tmp_path / "demo"
    (plugin / "flexserv_demo").mkdir(parents=True)
    (plugin / "flexserv_demo" / "__init__.py").write_text("")
    module = plugin / "flexserv_demo" / "engine.py"
    module.write_text("from flexserv_torch import pick_device\nfrom flexserv_torch.openmp import PASSIVE_ENV\n")
    global ROOT
    saved, ROOT = ROOT, tmp_path
    try:
        (plugin / "pyproject.toml").write_text('[project]\nname = "flexserv-demo"\ndependencies = ["flexserv-core"]\n')
        assert len(_violations(plugin, module)) == 2  # not a dependency: neither import is allowed
        (plugin / "pyproject.toml").write_text(
            '[project]\nname = "flexserv-demo"\ndependencies = ["flexserv-torch>=0.1"]\n'
        )
        [deep] = _violations(plugin, module)  # a dependency: its __all__, never its modules
        assert "flexserv_torch.openmp" in deep
    finally:
        ROOT = saved


#: The facade, exactly: adding a public name is a reviewed change to this list, not a
#: side effect (the error message says which names differ).
FACADE = {
    "CHAT_TEMPLATE_DEFAULTS", "CHAT_TEMPLATE_REQUEST", "TemplateVariablesMisconfigured", "reserved_template_names",
    "__version__", "Backend", "ChatCompletionRequest", "ChatMessage",
    "call_hook", "chat_prompt_ids", "check_chat_request", "check_prompt_chars", "check_prompt_text", "check_token_ids", "ClientDisconnected", "Command",
    "CommandContext", "Constraint", "ConstraintCompiler", "ConstraintKind",
    "ContextLengthExceeded", "convert_param", "CoreSettings", "create_app",
    "create_plugin_manager", "decode_json_object", "default_cache_dir", "EngineStats",
    "ErrorResponse", "EvictionReason", "FinishReason", "FlexServer", "FlexServError",
    "FlexServPluginManager", "FunctionDefinition", "GatewayTimeout", "hook_error", "hookimpl", "hookspec",
    "ImageInput", "InvalidRequest", "JsonSchemaFormat", "Lease", "LoadedModel",
    "ModelEvent", "ModelEventType", "ModelInfo", "ModelKind", "ModelLoadError", "ModelNotFound",
    "ModelRegistry", "ModelSpec", "ModelState", "NamedFunction", "NamedToolChoice",
    "NotFound", "open_request_context", "parse_body", "parse_fields",
    "PayloadTooLarge", "PDF_MEDIA_TYPE", "Placement", "PluginCommandError", "PluginError",
    "PluginHookError", "PluginLoadError", "PluginNotInstalled", "PluginStartupError", "prepare_params",
    "ProgressCallback", "PROJECT_NAME", "QuotaExceeded", "READY",
    "read_body", "Refusals", "refuse_unsupported", "request_owner", "request_reads_any_owner", "RequestContext",
    "RESERVED_TEMPLATE_KWARGS", "resolve_plugin_settings", "resolve_settings",
    "ResponseFormat", "route_scope", "SAMPLING_EXTENSIONS", "SamplingParams",
    "ServiceUnavailable", "Settings", "sniff_media_type", "sse_event", "sse_response", "error_event", "SSE_DONE",
    "SSEGenerator", "Stash", "StashKey", "StateUnavailable",
    "TextGenerationModel", "TextLimits", "TextSession", "TokenDelta",
    "Tool", "ToolCall", "ToolCallDelta", "ToolCallDeltaFunction", "ToolCallFunction",
    "ToolCallStreamer", "ToolCalling", "ToolChoice", "ToolPlan", "TooManyRequests",
    "TopLogprob", "UnloadResult", "UnsupportedMediaType", "UnsupportedParameter", "until_disconnect",
    "UsageError", "validate_body"
}  # fmt: skip
TESTING_KIT = {
    "app_client", "BASE_URL", "FAKE_ALTERNATIVES", "FAKE_SCRIPT", "FakeBackendPlugin",
    "FakeRequest", "FakeTextBackend", "FakeTextModel", "file_size_limit", "flexserv_cmd",
    "free_port", "make_app", "make_plugin_manager", "make_settings",
    "openai_client", "post_read", "run_flexserv", "running_app_client", "ServedApp", "served_with_and_without",
    "stop_process", "wait_healthy",
    "wait_until", "wait_until_async", "write_distribution"
}  # fmt: skip


@pytest.mark.parametrize(
    ("module", "pinned"), [(flexserv_core, FACADE), (flexserv_core.testing, TESTING_KIT)], ids=["core", "testing"]
)
def test_the_public_names_are_exactly_the_pinned_ones(module: types.ModuleType, pinned: set[str]) -> None:
    names = set(module.__all__)
    assert names == pinned, f"added: {sorted(names - pinned)}; removed: {sorted(pinned - names)}"


def test_every_error_class_of_the_core_is_public() -> None:
    """Errors defined anywhere in the core (not only ``errors.py``) are ones a plugin can meet."""
    import pkgutil

    for info in pkgutil.walk_packages(flexserv_core.__path__, "flexserv_core."):
        if info.name != "flexserv_core.__main__":
            importlib.import_module(info.name)

    def subclasses(cls: type) -> list[type]:
        return [c for sub in cls.__subclasses__() for c in (sub, *subclasses(sub))]

    core_errors = {
        c.__name__ for c in subclasses(flexserv_core.FlexServError) if c.__module__.startswith("flexserv_core")
    }
    assert core_errors and core_errors <= set(flexserv_core.__all__), sorted(core_errors - set(flexserv_core.__all__))
