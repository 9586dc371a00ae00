"""The review page: ``index.html`` and ``review-data.js`` written beside a review's chips (docs/review.md,
"The review page").

``index.html`` is one self-contained file (inline CSS and vanilla JavaScript, nothing fetched from the network) and
the same for every review: the page's sources in ``rtscore/review/static/`` put together (:func:`assemble_page`).
``review-data.js`` holds the review (``window.RTS_REVIEW = {...}``: the header and, per object, the facts the page
shows). The page loads it with ``<script src>``, so it works from ``file://`` (where a browser refuses ``fetch()`` of
a JSON file) and from a bucket over https alike. Both files are deterministic: the same review writes the same bytes.

The page keeps its verdicts in the browser's ``localStorage`` under a key holding the review id (two reviews open in
one browser never mix) and exports them as the GeoJSON verdict file of rtscore.review.verdicts.
"""

from __future__ import annotations

import json
import os
import uuid
from importlib import resources
from pathlib import Path
from typing import Any

from rtscore.review.manifest import (
    HEADER_FILE,
    MANIFEST_FILE,
    PAGE_DATA_FILE,
    PAGE_FILE,
    ReviewError,
    ReviewObject,
    iter_objects,
    object_facts,
    read_header,
)
from rtscore.storage.files import atomic_write_text

DATA_GLOBAL = "RTS_REVIEW"
STORAGE_PREFIX = "rts-review:"


def page_object(obj: ReviewObject) -> dict[str, Any]:
    """The facts of one object the page shows and exports (one entry of ``RTS_REVIEW.objects``)."""
    return {
        **object_facts(obj),
        "scene_uri": obj.scene_uri,
        "chip": obj.chip,
        "width": obj.chip_window[2],
        "height": obj.chip_window[3],
        "chip_outline": obj.chip_outline,
        "geometry": obj.geometry,
    }


def _js_json(data: Any) -> str:
    # ASCII only (U+2028/2029 escaped), and no "</" so the text is also safe inside an HTML script element.
    return json.dumps(data, ensure_ascii=True, separators=(",", ":")).replace("</", "<\\/")


def write_page(review_dir: Path) -> list[Path]:
    """Write the review page of the review in ``review_dir`` (``review.json`` and ``manifest.jsonl`` read).

    The objects are streamed into ``review-data.js`` one at a time (bounded memory); both files are written under a
    temporary name and renamed into place, so an unreadable manifest leaves the previous page as it was.

    Returns:
        The files written: ``index.html`` and ``review-data.js``.

    Raises:
        ReviewError: no review header or manifest, a line of the manifest that is not a review object, or a
            manifest whose object count differs from the header's (the file named).
    """
    header = read_header(review_dir / HEADER_FILE)
    data_path = review_dir / PAGE_DATA_FILE
    tmp = data_path.with_name(f".{data_path.name}.{uuid.uuid4().hex[:8]}.tmp")
    n = 0
    try:
        with tmp.open("w") as f:
            f.write(f"window.{DATA_GLOBAL} = {{\n")
            f.write(f'"header": {_js_json(header.model_dump(mode="json"))},\n')
            f.write('"objects": [')
            for obj in iter_objects(review_dir / MANIFEST_FILE):
                f.write(("\n" if n == 0 else ",\n") + _js_json(page_object(obj)))
                n += 1
            f.write("\n]};\n")
            f.flush()
            os.fsync(f.fileno())
        if n != header.n_objects:
            raise ReviewError(
                f"{review_dir / MANIFEST_FILE}: {n} objects, but {HEADER_FILE} says {header.n_objects}; the export "
                "is incomplete: run `rts review export` again (it resumes)"
            )
        tmp.replace(data_path)
    finally:
        tmp.unlink(missing_ok=True)
    page_path = review_dir / PAGE_FILE
    atomic_write_text(page_path, PAGE_HTML)
    return [page_path, data_path]


# The page's sources, package data (rtscore/review/static/, pyproject.toml's package-data): index.html names its style
# and script by <link> and <script src> so that each file is plain HTML, CSS or JavaScript (editors, linters, the
# browser opening static/index.html while the page is worked on); the page written beside the chips has both inlined
# (one file: a bucket or file:// serves nothing more). Keys (also in its help line): 1/r RTS, 2/n not RTS, 3/u
# unsure, s/Space skip, Left/Right previous/next, g grid/single, z undo, e export. Verdicts:
# localStorage["rts-review:<review_id>:verdicts"]; notes likewise ":notes"; the reviewer's name:
# localStorage["rts-review:reviewer"].
STATIC = "static"
STYLE_LINK = '<link rel="stylesheet" href="review.css">\n'
SCRIPT_LINK = '<script src="review.js"></script>\n'


def _static(name: str) -> str:
    # Text mode: a checkout with CRLF line ends still writes the same page (newlines read as "\n").
    return resources.files("rtscore.review").joinpath(STATIC, name).read_text(encoding="utf-8")


def _inline(html: str, link: str, element: str, body: str) -> str:
    """``html`` with its one ``link`` line replaced by ``<element>`` holding ``body`` (refused where ``link`` is not
    there exactly once, or ``body`` would end the element early)."""
    if html.count(link) != 1:
        raise RuntimeError(f"{STATIC}/index.html: {link.strip()!r} {html.count(link)} times; the page needs it once")
    if f"</{element}".lower() in body.lower():
        raise RuntimeError(f"{STATIC}: {link.strip()!r}'s file holds '</{element}': it would end the inlined element")
    return html.replace(link, f"<{element}>\n{body}</{element}>\n")


def assemble_page() -> str:
    """``index.html`` as written beside a review: static/index.html with review.css and review.js inlined."""
    html = _inline(_static("index.html"), STYLE_LINK, "style", _static("review.css"))
    return _inline(html, SCRIPT_LINK, "script", _static("review.js"))


PAGE_HTML = assemble_page()
