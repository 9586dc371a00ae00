"""The review page: ``index.html`` and ``review-data.js`` written beside a review's chips (docs/review.md,
"The review page").

``index.html`` is one self-contained file (inline CSS and vanilla JavaScript, nothing fetched from the network) and
the same for every review; ``review-data.js`` holds the review (``window.RTS_REVIEW = {...}``: the header and, per
object, the facts the page shows). The page loads it with ``<script src>``, so it works from ``file://`` (where a
browser refuses ``fetch()`` of a JSON file) and from a bucket over https alike. Both files are deterministic: the
same review writes the same bytes.

The page keeps its verdicts in the browser's ``localStorage`` under a key holding the review id (two reviews open in
one browser never mix) and exports them as the GeoJSON verdict file of rtscore.review.verdicts.
"""

from __future__ import annotations

import json
import os
import uuid
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


# The page. Keys (also in its help line): 1/r RTS, 2/n not RTS, 3/u unsure, s/Space skip, Left/Right previous/next,
# g grid/single, z undo, e export. Verdicts: localStorage["rts-review:<review_id>:verdicts"]; notes likewise
# ":notes"; the reviewer's name: localStorage["rts-review:reviewer"].
PAGE_HTML = r"""<!DOCTYPE html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>RTS review</title>
<style>
:root { --rts: #2e9d4a; --not_rts: #d2413a; --unsure: #e0a526; --none: #7d8590; --bg: #16191d; --panel: #22262c;
        --fg: #e8eaed; --dim: #9aa0a6; }
* { box-sizing: border-box; }
html, body { margin: 0; height: 100%; background: var(--bg); color: var(--fg);
             font: 14px/1.4 system-ui, -apple-system, "Segoe UI", Roboto, sans-serif; }
header { display: flex; flex-wrap: wrap; align-items: center; gap: 12px; padding: 8px 12px; background: var(--panel);
         border-bottom: 1px solid #333; }
header h1 { font-size: 16px; margin: 0; font-weight: 600; }
header .rid { color: var(--dim); font-family: ui-monospace, monospace; font-size: 12px; }
header label { color: var(--dim); }
input[type=text] { background: #111; color: var(--fg); border: 1px solid #444; border-radius: 4px; padding: 4px 6px; }
button { background: #333a42; color: var(--fg); border: 1px solid #4a525c; border-radius: 4px; padding: 5px 10px;
         cursor: pointer; font: inherit; }
button:hover { background: #3d454f; }
button.v-rts { border-color: var(--rts); } button.v-not_rts { border-color: var(--not_rts); }
button.v-unsure { border-color: var(--unsure); }
button.on.v-rts { background: var(--rts); } button.on.v-not_rts { background: var(--not_rts); }
button.on.v-unsure { background: var(--unsure); color: #111; }
#progress { display: flex; align-items: center; gap: 8px; }
#bar { width: 160px; height: 10px; background: #333; border-radius: 5px; overflow: hidden; display: flex; }
#bar span { display: block; height: 100%; }
.spacer { flex: 1; }
#message { padding: 6px 12px; background: #4a3b12; color: #ffe9a8; display: none; }
#message.show { display: block; }
main { display: flex; gap: 12px; padding: 12px; }
#stage { flex: 1; overflow: auto; display: flex; align-items: flex-start; justify-content: center; min-height: 200px; }
.chipbox { position: relative; flex: none; line-height: 0;
           background-color: #bbb;
           background-image: conic-gradient(#888 25%, #ddd 0 50%, #888 0 75%, #ddd 0);
           background-size: 16px 16px; }
.chipbox img { display: block; image-rendering: pixelated; }
.chipbox svg { position: absolute; left: 0; top: 0; overflow: visible; pointer-events: none; }
.halo { paint-order: stroke; stroke: #000; stroke-width: 3px; stroke-linejoin: round; }
#facts { width: 320px; flex: none; background: var(--panel); border-radius: 6px; padding: 12px;
         align-self: flex-start; }
#facts h2 { margin: 0 0 8px; font-size: 18px; }
#facts table { border-collapse: collapse; width: 100%; }
#facts td { padding: 2px 4px; vertical-align: top; word-break: break-all; }
#facts td:first-child { color: var(--dim); white-space: nowrap; word-break: normal; }
#verdict-buttons { display: flex; flex-wrap: wrap; gap: 6px; margin: 12px 0 8px; }
#note { width: 100%; }
#status { margin-top: 8px; font-weight: 600; }
#grid { display: none; flex-wrap: wrap; gap: 8px; padding: 12px; }
body.grid #grid { display: flex; } body.grid main { display: none; }
.cell { width: 140px; background: var(--panel); border: 3px solid var(--none); border-radius: 6px; padding: 4px;
        cursor: pointer; text-align: center; }
.cell.v-rts { border-color: var(--rts); } .cell.v-not_rts { border-color: var(--not_rts); }
.cell.v-unsure { border-color: var(--unsure); }
.cell.current { outline: 3px solid #fff; outline-offset: 1px; }
.cell .thumb { width: 128px; height: 128px; display: flex; align-items: center; justify-content: center; }
.cell .cap { font-size: 12px; color: var(--dim); line-height: 1.3; margin-top: 2px; }
footer { padding: 6px 12px; color: var(--dim); font-size: 13px; border-top: 1px solid #333; }
kbd { background: #333; border: 1px solid #555; border-radius: 3px; padding: 0 4px; color: var(--fg);
      font-family: ui-monospace, monospace; }
</style>
</head>
<body>
<header>
  <h1>RTS review</h1><span class="rid" id="rid"></span>
  <label>Reviewer <input type="text" id="reviewer" placeholder="your name or initials" autocomplete="off"></label>
  <div id="progress"><div id="bar"></div><span id="progress-text"></span></div>
  <span class="spacer"></span>
  <button id="toggle-view" title="g">Grid</button>
  <button id="export" title="e">Export verdicts</button>
</header>
<div id="message"></div>
<main>
  <div id="stage"></div>
  <aside id="facts">
    <h2 id="obj-title"></h2>
    <table id="facts-table"></table>
    <div id="verdict-buttons">
      <button class="v-rts" data-verdict="rts">1 RTS</button>
      <button class="v-not_rts" data-verdict="not_rts">2 not RTS</button>
      <button class="v-unsure" data-verdict="unsure">3 unsure</button>
      <button data-skip="1">s skip</button>
    </div>
    <label>Note <input type="text" id="note" placeholder="optional" autocomplete="off"></label>
    <div id="status"></div>
  </aside>
</main>
<div id="grid"></div>
<footer id="help">Keys: <kbd>1</kbd>/<kbd>r</kbd> RTS · <kbd>2</kbd>/<kbd>n</kbd> not RTS · <kbd>3</kbd>/<kbd>u</kbd>
unsure · <kbd>s</kbd>/<kbd>Space</kbd> skip · <kbd>←</kbd>/<kbd>→</kbd> previous/next · <kbd>g</kbd> grid/single ·
<kbd>z</kbd> undo · <kbd>e</kbd> export · <kbd>Enter</kbd> (grid) open · <kbd>Esc</kbd> leave a text field.
Verdicts are kept in this browser; export them to hand them in.</footer>
<script src="review-data.js"></script>
<script>
"use strict";
(function () {
  const SVGNS = "http://www.w3.org/2000/svg";
  const LABEL = { rts: "RTS", not_rts: "not RTS", unsure: "unsure" };
  const $ = (id) => document.getElementById(id);
  const msg = (text) => { const m = $("message"); m.textContent = text; m.classList.toggle("show", !!text); };
  const R = window.RTS_REVIEW;
  if (!R || !R.header || !Array.isArray(R.objects)) {
    msg("review-data.js did not load: keep index.html beside review-data.js and chips/ (the review directory " +
        "written by `rts review export`).");
    return;
  }
  const H = R.header, OBJS = R.objects, RID = H.review_id;
  const KEY = "rts-review:" + RID + ":";
  const REVIEWER_KEY = "rts-review:reviewer";
  const indexOf = new Map(OBJS.map((o, i) => [o.object_id, i]));
  let verdicts = {}, notes = {}, undo = [], cur = 0, storageOk = true;

  function load(name) {
    try { const t = localStorage.getItem(KEY + name); return t ? JSON.parse(t) : {}; }
    catch (err) { storageOk = false; return {}; }
  }
  function save() {
    try {
      localStorage.setItem(KEY + "verdicts", JSON.stringify({ v: 1, verdicts: verdicts }));
      localStorage.setItem(KEY + "notes", JSON.stringify(notes));
      localStorage.setItem(KEY + "position", String(cur));
    } catch (err) {
      storageOk = false;
      msg("This browser does not keep the verdicts (" + err + "): export them now and often.");
    }
  }
  const stored = load("verdicts");
  for (const [k, v] of Object.entries(stored.verdicts || {})) if (indexOf.has(Number(k))) verdicts[k] = v;
  notes = load("notes");
  try {
    const p = Number(localStorage.getItem(KEY + "position"));
    if (Number.isInteger(p) && p >= 0 && p < OBJS.length) cur = p;
    $("reviewer").value = localStorage.getItem(REVIEWER_KEY) || "";
  } catch (err) { storageOk = false; }
  if (!storageOk) msg("This browser does not keep the verdicts (localStorage blocked): export them before closing.");

  const isoNow = () => new Date().toISOString().replace(/\.\d{3}Z$/, "Z");
  const fmt = (x, d) => (x === null || x === undefined ? "–" : Number(x).toFixed(d));
  const area = (m2) =>
    Math.round(m2).toLocaleString("en-US") + " m²" + (m2 >= 10000 ? " (" + (m2 / 1e4).toFixed(2) + " ha)" : "");
  const svg = (tag, attrs, parent) => {
    const e = document.createElementNS(SVGNS, tag);
    for (const [k, v] of Object.entries(attrs)) e.setAttribute(k, v);
    if (parent) parent.appendChild(e);
    return e;
  };
  const xy = (p, z) => (p[0] * z).toFixed(2) + "," + (p[1] * z).toFixed(2);
  const ringPath = (rings, z) => rings.map((r) => "M" + r.map((p) => xy(p, z)).join("L") + "Z").join(" ");

  function niceMetres(m) {
    const p = Math.pow(10, Math.floor(Math.log10(m)));
    for (const f of [5, 2, 1]) if (f * p <= m) return f * p;
    return p;
  }

  function renderProgress() {
    const counts = { rts: 0, not_rts: 0, unsure: 0 };
    for (const v of Object.values(verdicts)) counts[v.verdict] += 1;
    const judged = counts.rts + counts.not_rts + counts.unsure, n = OBJS.length;
    $("progress-text").textContent = "judged " + judged + " / " + n + " · RTS " + counts.rts + " · not RTS " +
      counts.not_rts + " · unsure " + counts.unsure;
    const bar = $("bar");
    bar.textContent = "";
    for (const k of ["rts", "not_rts", "unsure"]) {
      const s = document.createElement("span");
      s.style.width = (n ? (100 * counts[k]) / n : 0) + "%";
      s.style.background = "var(--" + k + ")";
      bar.appendChild(s);
    }
    return judged;
  }

  function chipBox(o, z, withLabels) {
    const box = document.createElement("div");
    box.className = "chipbox";
    const W = o.width * z, Hh = o.height * z;
    box.style.width = W + "px";
    box.style.height = Hh + "px";
    const img = document.createElement("img");
    img.src = o.chip;
    img.alt = "chip of object " + o.object_id;
    img.width = W;
    img.height = Hh;
    img.loading = withLabels ? "eager" : "lazy";
    box.appendChild(img);
    const s = svg("svg", { width: W, height: Hh, viewBox: "0 0 " + W + " " + Hh, class: "overlay" }, box);
    const d = ringPath(o.chip_outline, z);
    const line = { d: d, fill: "none", "stroke-linejoin": "round" };
    svg("path", Object.assign({ stroke: "#000", "stroke-width": withLabels ? 4 : 3 }, line), s);
    svg("path", Object.assign({ stroke: "#ffd400", "stroke-width": withLabels ? 2 : 1.5 }, line), s);
    if (!withLabels) return box;
    const fs = 13;
    const t = svg("text", { x: 6, y: fs + 4, fill: "#fff", "font-size": fs, class: "halo" }, s);
    t.textContent = "p " + fmt(o.prob_mean, 2) + " (max " + fmt(o.prob_max, 2) + ")";
    const a = svg("text", { x: W - 6, y: Hh - 8, fill: "#fff", "font-size": fs, "text-anchor": "end", class: "halo" },
                  s);
    a.textContent = area(o.ground_area_m2);
    const target = Math.max(40, W / 3);
    const metres = niceMetres((target / z) * o.pixel_ground_m);
    const px = (metres / o.pixel_ground_m) * z;
    const y = Hh - 10;
    svg("rect", { x: 7, y: y - 4, width: px + 2, height: 8, fill: "#000" }, s);
    svg("rect", { x: 8, y: y - 3, width: px / 2, height: 6, fill: "#fff" }, s);
    svg("rect", { x: 8 + px / 2, y: y - 3, width: px / 2, height: 6, fill: "#666" }, s);
    const l = svg("text", { x: 8, y: y - 8, fill: "#fff", "font-size": fs, class: "halo" }, s);
    l.textContent = metres >= 1000 ? metres / 1000 + " km" : metres + " m";
    return box;
  }

  function zoomFor(o) {
    const stage = $("stage");
    const aw = Math.max(64, stage.clientWidth - 8);
    const ah = Math.max(64, window.innerHeight - stage.getBoundingClientRect().top - 60);
    return Math.max(1, Math.floor(Math.min(aw / o.width, ah / o.height)));
  }

  function renderSingle() {
    const o = OBJS[cur];
    if (!o) return;
    const stage = $("stage");
    stage.textContent = "";
    const z = zoomFor(o);
    const box = chipBox(o, z, true);
    box.id = "chip";
    box.dataset.zoom = String(z);
    stage.appendChild(box);
    $("obj-title").textContent = "Object " + o.object_id + "  (" + (cur + 1) + " of " + OBJS.length + ")";
    const rows = [
      ["object id", o.object_id], ["scene", o.scene_id], ["region", o.region ?? "–"], ["split", o.split ?? "–"],
      ["prob mean", fmt(o.prob_mean, 3)], ["prob max", fmt(o.prob_max, 3)], ["ground area", area(o.ground_area_m2)],
      ["size bin", o.size_bin ?? "–"], ["partial", o.partial ? "yes (cut by the scene edge)" : "no"],
      ["pixel", fmt(o.pixel_ground_m, 2) + " m · zoom " + z + "×"], ["campaign", H.campaign.uri],
    ];
    const tbl = $("facts-table");
    tbl.textContent = "";
    for (const [k, v] of rows) {
      const tr = document.createElement("tr");
      const a = document.createElement("td"), b = document.createElement("td");
      a.textContent = k; b.textContent = String(v);
      if (k === "scene") b.title = o.scene_uri;
      tr.append(a, b);
      tbl.appendChild(tr);
    }
    const v = verdicts[o.object_id];
    for (const b of document.querySelectorAll("#verdict-buttons button[data-verdict]"))
      b.classList.toggle("on", !!v && v.verdict === b.dataset.verdict);
    $("status").textContent = v ? "verdict: " + LABEL[v.verdict] + " (" + (v.reviewer || "?") + ")" : "not judged";
    $("status").style.color = v ? "var(--" + v.verdict + ")" : "var(--dim)";
    $("note").value = notes[o.object_id] || "";
  }

  function renderGrid() {
    const grid = $("grid");
    grid.textContent = "";
    OBJS.forEach((o, i) => {
      const cell = document.createElement("div");
      const v = verdicts[o.object_id];
      cell.className = "cell" + (v ? " v-" + v.verdict : "") + (i === cur ? " current" : "");
      cell.dataset.objectId = String(o.object_id);
      const m = Math.max(o.width, o.height);
      const z = m <= 128 ? Math.floor(128 / m) : 128 / m;
      const thumb = document.createElement("div");
      thumb.className = "thumb";
      thumb.appendChild(chipBox(o, z, false));
      const cap = document.createElement("div");
      cap.className = "cap";
      cap.textContent = "#" + o.object_id + " · p " + fmt(o.prob_mean, 2) + " · " + (v ? LABEL[v.verdict] : "—");
      cell.append(thumb, cap);
      cell.addEventListener("click", () => { cur = i; setView("single"); });
      grid.appendChild(cell);
    });
    const c = grid.querySelector(".current");
    if (c) c.scrollIntoView({ block: "nearest" });
  }

  let view = "single";
  function setView(v) {
    view = v;
    document.body.classList.toggle("grid", v === "grid");
    $("toggle-view").textContent = v === "grid" ? "Single" : "Grid";
    render();
  }
  function render() {
    const judged = renderProgress();
    if (view === "grid") renderGrid(); else renderSingle();
    const done = judged === OBJS.length && OBJS.length > 0;
    if (storageOk) msg(done ? "All " + OBJS.length + " objects judged: export your verdicts (e)." : "");
  }

  function nextUnjudged(from) {
    for (let k = 1; k <= OBJS.length; k++) {
      const i = (from + k) % OBJS.length;
      if (!verdicts[OBJS[i].object_id]) return i;
    }
    return from;
  }

  function reviewer() { return $("reviewer").value.trim(); }

  function judge(verdict) {
    const o = OBJS[cur];
    if (!o) return;
    if (!reviewer()) {
      msg("Type your name in Reviewer first: every verdict records who judged it.");
      $("reviewer").focus();
      return;
    }
    undo.push({ id: o.object_id, prev: verdicts[o.object_id] || null });
    verdicts[o.object_id] = { verdict: verdict, reviewer: reviewer(), time: isoNow() };
    cur = nextUnjudged(cur);
    save();
    render();
  }
  function skip() { cur = Math.min(cur + 1, OBJS.length - 1); save(); render(); }
  function step(d) { cur = Math.max(0, Math.min(OBJS.length - 1, cur + d)); save(); render(); }
  function undoLast() {
    const u = undo.pop();
    if (!u) { msg("Nothing to undo."); return; }
    if (u.prev) verdicts[u.id] = u.prev; else delete verdicts[u.id];
    cur = indexOf.get(u.id);
    save();
    render();
  }

  function exportVerdicts() {
    if (!reviewer()) { msg("Type your name in Reviewer before exporting."); $("reviewer").focus(); return; }
    const features = [];
    for (const o of OBJS) {
      const v = verdicts[o.object_id];
      if (!v) continue;
      const props = { object_id: o.object_id, verdict: v.verdict, reviewer: v.reviewer, time: v.time,
                      note: notes[o.object_id] || "" };
      features.push({ type: "Feature", geometry: o.geometry, properties: props });
    }
    const doc = { type: "FeatureCollection",
      rts_review: { schema_version: 1, review_id: RID, objects_sha256: H.campaign.objects_sha256,
                    package_sha256: H.campaign.package_sha256, reviewer: reviewer(), exported: isoNow() },
      features: features };
    const blob = new Blob([JSON.stringify(doc, null, 1) + "\n"], { type: "application/geo+json" });
    const a = document.createElement("a");
    a.href = URL.createObjectURL(blob);
    a.download = "verdicts-" + RID.slice(0, 12) + ".geojson";
    document.body.appendChild(a);
    a.click();
    setTimeout(() => { URL.revokeObjectURL(a.href); a.remove(); }, 1000);
    msg("Exported " + features.length + " verdicts to " + a.download + ".");
  }

  $("rid").textContent = "review " + RID.slice(0, 12);
  $("rid").title = "review " + RID + "\ncampaign " + H.campaign.uri;
  $("reviewer").addEventListener("input", () => {
    try { localStorage.setItem(REVIEWER_KEY, reviewer()); } catch (err) { storageOk = false; }
  });
  $("note").addEventListener("input", () => {
    const id = OBJS[cur].object_id, t = $("note").value;
    if (t) notes[id] = t; else delete notes[id];
    save();
  });
  $("toggle-view").addEventListener("click", (e) => {
    e.currentTarget.blur();
    setView(view === "grid" ? "single" : "grid");
  });
  $("export").addEventListener("click", (e) => { e.currentTarget.blur(); exportVerdicts(); });
  for (const b of document.querySelectorAll("#verdict-buttons button"))
    b.addEventListener("click", () => {
      b.blur();  // so that Space or Enter afterwards are the page's keys, not a second click
      if (b.dataset.skip) skip(); else judge(b.dataset.verdict);
    });
  window.addEventListener("resize", () => { if (view === "single") renderSingle(); });

  document.addEventListener("keydown", (e) => {
    if (e.ctrlKey || e.metaKey || e.altKey) return;
    const t = e.target;
    if (t && (t.tagName === "INPUT" || t.tagName === "TEXTAREA")) {
      if (e.key === "Escape" || e.key === "Enter") { t.blur(); e.preventDefault(); }
      return;
    }
    const k = e.key.length === 1 ? e.key.toLowerCase() : e.key;
    const act = {
      "1": () => judge("rts"), r: () => judge("rts"), "2": () => judge("not_rts"), n: () => judge("not_rts"),
      "3": () => judge("unsure"), u: () => judge("unsure"), s: skip, " ": skip,
      ArrowLeft: () => step(-1), ArrowRight: () => step(1), g: () => setView(view === "grid" ? "single" : "grid"),
      z: undoLast, e: exportVerdicts, Enter: () => { if (view === "grid") setView("single"); },
    }[k];
    if (act) { e.preventDefault(); act(); }
  });

  if (!OBJS.length) { msg("This review has no objects."); return; }
  if (verdicts[OBJS[cur].object_id]) cur = nextUnjudged(cur);
  render();
})();
</script>
</body>
</html>
"""
