"""How results read as text: the one markdown-table renderer every report, console table and Prefect UI artifact
uses (:mod:`rtscore.report.markdown`). It sits at the bottom of the layers so that any package may render a table."""

from rtscore.report.markdown import Align, md_table

__all__ = ["Align", "md_table"]
