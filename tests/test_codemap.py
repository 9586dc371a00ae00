"""The code map in docs/development.md is the tree's: every package and module named, none that is gone."""

from tests.codemap import DOC, code_map, rendered


def test_the_code_map_is_generated_from_the_current_tree() -> None:
    assert DOC.read_text() == rendered(DOC.read_text()), (
        "docs/development.md's code map is stale: python -m tests.codemap"
    )


def test_every_module_says_where_it_is_tested() -> None:
    text = code_map()
    assert "| `rtscore/data/store/reader.py` |" in text
    assert "`tests/report/test_markdown.py` (mirror)" in text
