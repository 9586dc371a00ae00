"""A scene's acquisition date, read from its GeoTIFF tags (docs/inventories.md, "Dates").

Checked in this order, first found wins (tag names are matched without regard to case, in the default metadata
domain):

1. ``ACQUISITION_DATE`` (also ``ACQUISITIONDATE``, ``DATE_ACQUIRED``, ``ACQUIRED``): the acquisition, as providers
   and our own tools write it;
2. ``TIFFTAG_DATETIME``, the TIFF date-time tag (``YYYY:MM:DD HH:MM:SS``). Providers write the acquisition there, but
   some processing tools overwrite it with the processing time, which is why an explicit acquisition tag, or the
   date a scene list gives, wins over it.

A tag whose value is not a date is an error naming the scene and the tag (a wrong date would silently pass or
ignore every label of the scene). A scene with neither tag has no date (None): the caller warns once and counts it.
"""

from __future__ import annotations

import datetime as dt
import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from rtscore.errors import PipelineError

ACQUISITION_TAGS = ("ACQUISITION_DATE", "ACQUISITIONDATE", "DATE_ACQUIRED", "ACQUIRED")
TIFF_DATETIME_TAG = "TIFFTAG_DATETIME"
_DATE_PREFIX = re.compile(r"^\s*(\d{4})[-:/](\d{1,2})[-:/](\d{1,2})")


class SceneDateError(PipelineError, ValueError):
    """A scene's date tag that is not a date; the message names the scene and the tag."""


def parse_scene_date(value: Any, what: str) -> dt.date:
    """A date from the text of a tag or a scene list cell: ``YYYY-MM-DD``, ``YYYY:MM:DD HH:MM:SS`` or an ISO
    date-time (its date part). ``what`` names the source in the error."""
    m = _DATE_PREFIX.match(str(value))
    try:
        if m is None:
            raise ValueError("no YYYY-MM-DD date at its start")
        return dt.date(int(m[1]), int(m[2]), int(m[3]))
    except ValueError as err:
        raise SceneDateError(f"{what}: {str(value)!r} is not a date ({err})") from None


def date_from_tags(tags: Mapping[str, str], what: str) -> tuple[dt.date | None, str | None]:
    """(date, tag it came from) of a GeoTIFF's default-domain tags; (None, None) without a date tag."""
    upper = {str(k).upper(): v for k, v in tags.items()}
    for tag in (*ACQUISITION_TAGS, TIFF_DATETIME_TAG):
        if tag in upper and str(upper[tag]).strip():
            return parse_scene_date(upper[tag], f"{what}: tag {tag}"), tag
    return None, None


def scene_date(path: str | Path) -> tuple[dt.date | None, str | None]:
    """(acquisition date, the tag it came from) of a GeoTIFF scene; (None, None) when it carries no date tag."""
    import rasterio

    with rasterio.open(path) as ds:
        return date_from_tags(ds.tags(), str(path))
