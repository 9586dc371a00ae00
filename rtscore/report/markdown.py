"""One markdown-table renderer (GitHub-flavoured): a header, a separator with the columns' alignment, one line a row.

Every table the project writes (reports, ``report.md`` files, the Prefect UI's artifacts, the console) is rendered
here, so a table reads the same everywhere and a change of style is made once. Cells are ``str()`` of what is
passed: formatting a number is the caller's business (a figure's precision is part of its meaning). With
``escape=True`` a cell's ``|`` is escaped and its line breaks folded, for cells holding user text (file names,
error messages) that would otherwise break the table.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Literal

Align = Literal["left", "right", "center", ""]

_SEPARATOR: dict[str, str] = {"": "---", "left": ":---", "right": "---:", "center": ":---:"}


def md_cell(value: object, escape: bool = False) -> str:
    """One cell's text: ``str(value)``, with ``|`` escaped and line breaks folded when ``escape``."""
    text = str(value)
    return text.replace("|", "\\|").replace("\n", " ") if escape else text


def md_row(cells: Iterable[object], escape: bool = False) -> str:
    """One table line: ``| a | b |``."""
    return "| " + " | ".join(md_cell(c, escape) for c in cells) + " |"


def md_table(
    header: Sequence[object],
    rows: Iterable[Sequence[object]],
    align: Sequence[Align] | None = None,
    escape: bool = False,
) -> list[str]:
    """The table's lines: header, separator (``|---|---:|``, one entry of ``align`` per column; default
    alignment everywhere when None) and one line per row. A row of another length than the header is a bug in
    the caller and raises ValueError naming it."""
    if align is not None and len(align) != len(header):
        raise ValueError(f"align has {len(align)} entries for {len(header)} columns")
    aligns = list(align) if align is not None else [""] * len(header)
    lines = [md_row(header, escape), "|" + "|".join(_SEPARATOR[a] for a in aligns) + "|"]
    for i, row in enumerate(rows):
        cells = list(row)
        if len(cells) != len(header):
            raise ValueError(
                f"row {i} has {len(cells)} cells for {len(header)} columns ({', '.join(map(str, header))})"
            )
        lines.append(md_row(cells, escape))
    return lines
