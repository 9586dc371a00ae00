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

  // An object across cells of several regions: its own region and the others its cells touch; its split is the
  // strictest of theirs (what ingest puts it in), so say so.
  function regionText(o) {
    const others = (o.regions || []).filter((r) => r !== o.region);
    return (o.region ?? "–") + (others.length ? " (also touches " + others.join(", ") + ")" : "");
  }

  function splitText(o) {
    const several = (o.regions || []).length > 1;
    return (o.split ?? "–") + (several && o.split ? " (the strictest of the regions it touches)" : "");
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
      ["object id", o.object_id], ["scene", o.scene_id], ["region", regionText(o)], ["split", splitText(o)],
      ["inventory", o.inventory_uids == null ? "–" : (o.inventory_uids.join(", ") || "none overlapped")],
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
