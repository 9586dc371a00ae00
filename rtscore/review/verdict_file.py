"""A verdict file of either kind: the review page's GeoJSON (rtscore.review.verdicts) or a Label Studio JSON export
(rtscore.review.label_studio)."""

from __future__ import annotations

import json
from pathlib import Path

from rtscore.review.label_studio import verdicts_from_label_studio
from rtscore.review.manifest import ReviewError
from rtscore.review.verdicts import VerdictSet, from_geojson


def read_verdicts(path: str | Path) -> VerdictSet:
    """The verdicts of a file the review page exported (GeoJSON) or a Label Studio JSON export.

    Raises:
        ReviewError: not JSON, not valid GeoJSON, a feature without an object id or with an unknown verdict, an
            object judged twice, a Label Studio export of other tasks (the file and the feature or object named).
    """
    p = Path(path)
    try:
        text = p.read_text()
    except FileNotFoundError:
        raise ReviewError(f"{p}: verdict file not found") from None
    except (OSError, UnicodeDecodeError) as err:
        raise ReviewError(f"{p}: not readable as text ({err})") from None
    try:
        data = json.loads(text)
    except json.JSONDecodeError as err:
        raise ReviewError(
            f"{p}: not valid JSON (line {err.lineno}, column {err.colno}: {err.msg}); a verdict file is the GeoJSON "
            "the review page exports, or a Label Studio JSON export"
        ) from None
    if isinstance(data, list):
        return verdicts_from_label_studio(data, p)
    if not isinstance(data, dict):
        raise ReviewError(f"{p}: a verdict file is a GeoJSON FeatureCollection (an object), not {type(data).__name__}")
    return from_geojson(data, p)
