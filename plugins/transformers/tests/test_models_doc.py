"""``docs/models.md`` is what the architecture matrix defines, rendered."""

from __future__ import annotations

from flexserv_transformers import families


def test_models_doc_is_generated_from_the_matrix() -> None:
    path = families.doc_path()
    assert path.read_text(encoding="utf-8") == families.render_doc(), (
        "docs/models.md is out of date: run python -m flexserv_transformers.families"
    )
    assert families.main(["--check"]) == 0


def test_every_family_is_a_row_with_its_status() -> None:
    text = families.render_doc()
    for fam in families.FAMILIES:
        row = next(line for line in text.splitlines() if line.startswith(f"| {fam.name} |"))
        assert ("| exact | exact |" in row) == fam.paged, row
