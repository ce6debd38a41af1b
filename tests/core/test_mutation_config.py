"""The bounded mutation runs of docs/testing.md (`make mutation`) select what they
claim: the modules they mutate exist, and so does every test file they run, the
block-residency tests of the paged engine's ``blocks.py`` included."""

from __future__ import annotations

import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PLUGIN = ROOT / "plugins" / "transformers"


def mutmut(directory: Path) -> dict[str, list[str]]:
    section: dict[str, list[str]] = tomllib.loads((directory / "pyproject.toml").read_text())["tool"]["mutmut"]
    return section


def test_the_core_run_selects_existing_modules_and_tests() -> None:
    config = mutmut(ROOT)
    assert "paths_to_mutate" not in config and "tests_dir" not in config  # deprecated in mutmut 3
    assert config["source_paths"] and all((ROOT / p).is_file() for p in config["source_paths"])
    assert all((ROOT / p).is_file() for p in config["pytest_add_cli_args_test_selection"])


def test_the_engine_run_covers_blocks_with_its_residency_tests() -> None:
    config = mutmut(PLUGIN)
    assert "flexserv_transformers/engine/blocks.py" in config["only_mutate"]
    selection = config["pytest_add_cli_args_test_selection"]
    assert "tests/engine/test_block_residency.py" in selection
    assert all((PLUGIN / p).is_file() for p in [*config["only_mutate"], *selection])


def test_make_mutation_runs_both_from_a_clean_state() -> None:
    makefile = (ROOT / "Makefile").read_text()
    recipe = makefile.split("\nmutation:", 1)[1].split("\n\n", 1)[0]
    assert "rm -rf mutants plugins/transformers/mutants" in recipe
    assert recipe.count("mutmut run") == 2 and "cd plugins/transformers" in recipe
