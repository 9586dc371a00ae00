"""The review page: its files (deterministic, self-contained), `serve`, and a real headless Chromium reviewing 20 chips
with the keyboard, reloading, and exporting a verdict file that rtscore reads back."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import urllib.error
import urllib.request
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from rtscore.review import page as page_mod
from rtscore.review.manifest import PAGE_DATA_FILE, PAGE_FILE, ReviewError, ReviewHeader, ReviewObject
from rtscore.review.page import PAGE_HTML, assemble_page, write_page
from rtscore.review.serve import serve
from rtscore.review.verdict_file import read_verdicts
from rtscore.review.verdicts import Verdict, verdicts_geojson

MakeReview = Callable[..., tuple[Path, ReviewHeader, list[ReviewObject]]]


def read_data_js(path: Path) -> dict[str, Any]:
    text = path.read_text()
    prefix = "window.RTS_REVIEW = "
    assert text.startswith(prefix) and text.endswith(";\n")
    return json.loads(text[len(prefix) : -2])


def test_page_files_deterministic_and_self_contained(make_review: MakeReview) -> None:
    root, header, objects = make_review()
    written = write_page(root)
    assert written == [root / PAGE_FILE, root / PAGE_DATA_FILE]
    first = [p.read_bytes() for p in written]
    write_page(root)
    assert [p.read_bytes() for p in written] == first  # no timestamps: the same review, the same bytes

    html = (root / PAGE_FILE).read_text()
    assert html == PAGE_HTML
    # Nothing fetched from the network: no external script, style, font or image; the data by a relative <script src>.
    assert re.findall(r'<script src="([^"]+)"', html) == [PAGE_DATA_FILE]
    assert not re.search(r"""(src|href)\s*=\s*["']?(https?:)?//""", html)
    assert "<link" not in html and "@import" not in html and "fetch(" not in html
    assert "image-rendering: pixelated" in html
    for key in (
        "<kbd>1</kbd>/<kbd>r</kbd> RTS",
        "<kbd>z</kbd> undo",
        "<kbd>g</kbd> grid/single",
        "<kbd>e</kbd> export",
    ):
        assert key in html

    data = read_data_js(root / PAGE_DATA_FILE)
    assert data["header"] == header.model_dump(mode="json")
    assert [o["object_id"] for o in data["objects"]] == [o.object_id for o in objects]
    o, m = data["objects"][3], objects[3]
    assert (o["width"], o["height"]) == m.chip_window[2:]
    assert o["geometry"] == m.geometry and o["chip_outline"] == m.chip_outline and o["chip"] == m.chip
    assert o["pixel_ground_m"] == m.pixel_ground_m and o["partial"] == m.partial and o["region"] == m.region
    assert o["inventory_uids"] == m.inventory_uids == [f"inv-{m.object_id}"]


def test_page_is_its_static_sources_put_together() -> None:
    """static/index.html names review.css and review.js (each a plain file); the written page has them inlined
    verbatim, so it needs nothing beside it but review-data.js and chips/."""
    static = Path(page_mod.__file__).parent / "static"
    html, css, js = ((static / n).read_text(encoding="utf-8") for n in ("index.html", "review.css", "review.js"))
    assert re.findall(r'<script src="([^"]+)"', html) == [PAGE_DATA_FILE, "review.js"]  # the data first
    assert '<link rel="stylesheet" href="review.css">' in html
    assert assemble_page() == PAGE_HTML
    assert PAGE_HTML.count(f"<style>\n{css}</style>\n") == 1 and PAGE_HTML.count(f"<script>\n{js}</script>\n") == 1
    assert "review.css" not in PAGE_HTML and "review.js" not in PAGE_HTML
    with pytest.raises(RuntimeError, match='\'<link rel="stylesheet" href="review.css">\' 0 times'):
        page_mod._inline(html.replace(page_mod.STYLE_LINK, ""), page_mod.STYLE_LINK, "style", css)
    with pytest.raises(RuntimeError, match="holds '</script'"):
        page_mod._inline(html, page_mod.SCRIPT_LINK, "script", js + "// </SCRIPT>\n")


def test_page_script_parses() -> None:
    """A syntax check of review.js where Node is installed (the browser tests run it where Chromium is)."""
    node = shutil.which("node")
    if node is None:
        pytest.skip("no node on PATH")
    js = Path(page_mod.__file__).parent / "static" / "review.js"
    done = subprocess.run([node, "--check", str(js)], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr


def test_page_refuses_an_incomplete_manifest_and_keeps_the_old_page(make_review: MakeReview) -> None:
    root, _, _ = make_review()
    write_page(root)
    before = (root / PAGE_DATA_FILE).read_bytes()
    lines = (root / "manifest.jsonl").read_text().splitlines(keepends=True)
    (root / "manifest.jsonl").write_text("".join(lines[:-1]))
    with pytest.raises(ReviewError, match=r"manifest.jsonl: 24 objects, but review.json says 25"):
        write_page(root)
    (root / "manifest.jsonl").write_text("".join(lines[:3]) + '{"object_id": 1}\n')
    with pytest.raises(ReviewError, match=r"manifest.jsonl: line 4: not a review object"):
        write_page(root)
    assert (root / PAGE_DATA_FILE).read_bytes() == before
    assert sorted(p.name for p in root.iterdir() if p.name.startswith(".")) == []  # no temporary file left


def test_serve_is_local_and_read_only(make_review: MakeReview, tmp_path: Path) -> None:
    root, _, objects = make_review()
    with pytest.raises(ReviewError, match="no review page"):
        serve(root)
    write_page(root)
    server, url = serve(root)
    try:
        assert re.fullmatch(r"http://127\.0\.0\.1:\d+/index\.html", url)
        with urllib.request.urlopen(url) as r:
            assert r.read().decode() == PAGE_HTML
        with urllib.request.urlopen(url.replace(PAGE_FILE, objects[0].chip)) as r:
            assert r.read() == (root / objects[0].chip).read_bytes()
            assert r.headers["Content-Type"] == "image/png"
        for method in ("PUT", "POST", "DELETE"):
            req = urllib.request.Request(url, data=b"x", method=method)
            with pytest.raises(urllib.error.HTTPError) as err:
                urllib.request.urlopen(req)
            assert err.value.code == 501
        with pytest.raises(urllib.error.HTTPError) as err:
            urllib.request.urlopen(url.replace(PAGE_FILE, "../" * 4 + "etc/passwd"))
        assert err.value.code == 404
    finally:
        server.shutdown()
        server.server_close()


# --- the browser ---------------------------------------------------------------------------------------------------


class PageModel:
    """What the page should do with each key (its documented behaviour), to compare the export against."""

    def __init__(self, ids: list[int]) -> None:
        self.ids, self.cur = ids, 0
        self.verdicts: dict[int, str] = {}
        self.undo: list[tuple[int, str | None]] = []

    def press(self, key: str) -> None:
        verdict = {"r": "rts", "1": "rts", "n": "not_rts", "2": "not_rts", "u": "unsure", "3": "unsure"}.get(key)
        oid = self.ids[self.cur]
        if verdict:
            self.undo.append((oid, self.verdicts.get(oid)))
            self.verdicts[oid] = verdict
            n = len(self.ids)
            nxt = [(self.cur + k) % n for k in range(1, n + 1) if self.ids[(self.cur + k) % n] not in self.verdicts]
            self.cur = nxt[0] if nxt else self.cur
        elif key in ("s", " "):
            self.cur = min(self.cur + 1, len(self.ids) - 1)
        elif key == "z":
            oid, prev = self.undo.pop()
            if prev is None:
                del self.verdicts[oid]
            else:
                self.verdicts[oid] = prev
            self.cur = self.ids.index(oid)


# 20 chips: 16 judged (r / n / u and 1 / 2 / 3), 4 skipped (s and Space), one verdict undone and given again.
KEYS = ["r", "n", "u", "s", "1", "2", "3", " ", "r", "z", "n", "r", "r", "s", "u", "n", "2", "1", "s", "r", "n", "u"]


def test_review_20_chips_with_the_keyboard_reload_export(
    chromium: Any, make_review: MakeReview, tmp_path: Path
) -> None:
    root, header, objects = make_review()
    write_page(root)
    ids = [o.object_id for o in objects]
    model = PageModel(ids)
    context = chromium.new_context(accept_downloads=True, viewport={"width": 1280, "height": 800})
    errors: list[str] = []
    try:
        page = context.new_page()
        page.on("pageerror", lambda e: errors.append(str(e)))
        page.on("console", lambda m: errors.append(m.text) if m.type == "error" else None)
        page.goto(root.joinpath(PAGE_FILE).as_uri())
        assert page.text_content("#progress-text") == "judged 0 / 25 · RTS 0 · not RTS 0 · unsure 0"
        page.keyboard.press("r")  # no reviewer yet: refused, the name field asked for
        assert "Type your name" in (page.text_content("#message") or "")
        page.fill("#reviewer", "ab")
        page.keyboard.press("Enter")  # leaves the field

        reviewed = set()
        for key in KEYS:
            if key != "z":
                reviewed.add(ids[model.cur])
            page.keyboard.press("Space" if key == " " else key)
            model.press(key)
            assert page.text_content("#obj-title") == f"Object {ids[model.cur]}  ({model.cur + 1} of 25)", key
        assert len(reviewed) == 20  # 20 chips judged or skipped
        expected = dict(model.verdicts)
        assert len(expected) == 16
        counts = {v: list(expected.values()).count(v) for v in ("rts", "not_rts", "unsure")}
        progress = f"judged 16 / 25 · RTS {counts['rts']} · not RTS {counts['not_rts']} · unsure {counts['unsure']}"
        assert page.text_content("#progress-text") == progress

        # The chip: drawn at an integer zoom, pixelated, the outline as inline SVG over it.
        zoom = int(page.get_attribute("#chip", "data-zoom") or 0)
        o = objects[model.cur]
        assert zoom >= 2
        assert page.eval_on_selector("#chip img", "e => [e.width, e.height]") == [
            o.chip_window[2] * zoom,
            o.chip_window[3] * zoom,
        ]
        assert page.eval_on_selector("#chip img", "e => getComputedStyle(e).imageRendering") == "pixelated"
        assert page.locator("#chip svg path").count() == 2 and "m²" in (page.text_content("#chip svg") or "")
        facts = page.eval_on_selector_all(
            "#facts-table tr", "rs => rs.map(r => [r.cells[0].textContent, r.cells[1].textContent])"
        )
        assert dict(facts)["inventory"] == (", ".join(o.inventory_uids or []) or "none overlapped")
        page.screenshot(path="/tmp/review-page-single.png")

        page.reload()  # verdicts kept in the browser
        assert page.text_content("#progress-text") == progress
        page.keyboard.press("g")
        assert page.locator(".cell").count() == 25
        assert page.locator(".cell.v-rts").count() == counts["rts"]
        assert page.locator(".cell.v-not_rts").count() == counts["not_rts"]
        assert page.locator(".cell.v-unsure").count() == counts["unsure"]
        page.screenshot(path="/tmp/review-page-grid.png", full_page=True)
        page.click(f'.cell[data-object-id="{ids[24]}"]')  # a click opens the object
        assert page.text_content("#obj-title") == f"Object {ids[24]}  (25 of 25)"

        with page.expect_download() as download:
            page.keyboard.press("e")
        assert download.value.suggested_filename == f"verdicts-{header.review_id[:12]}.geojson"
        out = tmp_path / download.value.suggested_filename
        download.value.save_as(out)
    finally:
        context.close()
    assert errors == []

    vs = read_verdicts(out)
    assert vs.format == "geojson" and vs.review_id == header.review_id
    assert (vs.objects_sha256, vs.package_sha256) == (header.campaign.objects_sha256, header.campaign.package_sha256)
    assert {v.object_id: v.verdict for v in vs.verdicts} == expected
    assert all(v.reviewer == "ab" and re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ", v.time) for v in vs.verdicts)
    # The page's document is the one rtscore.review.verdicts builds (the format's one definition).
    doc = json.loads(out.read_text())
    exported = doc["rts_review"]["exported"]
    assert re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ", exported)
    by_time = [Verdict.model_validate(f["properties"]) for f in doc["features"]]
    assert doc == verdicts_geojson(header, objects, by_time, reviewer="ab", exported=exported)


def test_two_reviews_in_one_browser_do_not_mix(chromium: Any, make_review: MakeReview) -> None:
    root1, _, objs1 = make_review("review-1")
    root2, header2, _ = make_review("review-2", objects_sha256="d" * 64)
    shutil.copytree(root1 / "chips", root2 / "chips", dirs_exist_ok=True)
    for root in (root1, root2):
        write_page(root)
    context = chromium.new_context()
    try:
        page = context.new_page()
        page.goto(root1.joinpath(PAGE_FILE).as_uri())
        page.fill("#reviewer", "ab")
        page.keyboard.press("Escape")
        for key in "rnu":
            page.keyboard.press(key)
        assert page.text_content("#progress-text") == "judged 3 / 25 · RTS 1 · not RTS 1 · unsure 1"
        page.goto(root2.joinpath(PAGE_FILE).as_uri())  # same origin (file://), same localStorage
        assert page.text_content("#progress-text") == "judged 0 / 25 · RTS 0 · not RTS 0 · unsure 0"
        assert page.input_value("#reviewer") == "ab"  # the name is the browser's, not the review's
        assert header2.review_id[:12] in (page.text_content("#rid") or "")
        page.goto(root1.joinpath(PAGE_FILE).as_uri())
        assert page.text_content("#progress-text") == "judged 3 / 25 · RTS 1 · not RTS 1 · unsure 1"
        assert page.text_content("#obj-title") == f"Object {objs1[3].object_id}  (4 of 25)"
        page.click("button[data-verdict=not_rts]")  # a click judges; Space then skips (not a second click)
        page.keyboard.press("Space")
        assert page.text_content("#progress-text") == "judged 4 / 25 · RTS 1 · not RTS 2 · unsure 1"
        assert page.text_content("#obj-title") == f"Object {objs1[5].object_id}  (6 of 25)"
    finally:
        context.close()
