import pytest

from rtscore.report import md_table
from rtscore.report.markdown import md_cell


def test_a_table_is_header_separator_and_rows_in_the_projects_style() -> None:
    lines = md_table(["step", "seconds"], [("train", "1.5"), ("val", 2)], align=["", "right"])
    assert lines == ["| step | seconds |", "|---|---:|", "| train | 1.5 |", "| val | 2 |"]
    assert md_table(["a", "b", "c"], [], align=["left", "center", ""])[1] == "|:---|:---:|---|"


def test_user_text_is_escaped_only_when_asked() -> None:
    assert md_cell("a|b\nc", escape=True) == "a\\|b c"
    assert md_cell("a|b") == "a|b"
    assert md_table(["name"], [["x|y"]], escape=True)[2] == "| x\\|y |"


def test_a_row_of_the_wrong_width_is_refused_naming_it() -> None:
    with pytest.raises(ValueError, match=r"row 1 has 1 cells for 2 columns \(a, b\)"):
        md_table(["a", "b"], [(1, 2), (3,)])
    with pytest.raises(ValueError, match="align has 1 entries for 2 columns"):
        md_table(["a", "b"], [], align=["right"])
