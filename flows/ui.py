"""What the Prefect UI shows of a run: summaries, tables, links to artifacts and MLflow, images, progress.

Artifact keys (lowercase letters, digits, dashes) are given to the summaries and tables, so that the UI's
Artifacts page keeps their history; links and images are attached to the flow run only.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any
from urllib.parse import quote
from uuid import UUID

from prefect.artifacts import (
    create_image_artifact,
    create_link_artifact,
    create_markdown_artifact,
    create_progress_artifact,
    create_table_artifact,
    update_progress_artifact,
)

from rtscore.stages import ArtifactRef

GCS_CONSOLE = "https://console.cloud.google.com/storage/browser"
GCS_AUTHENTICATED = "https://storage.cloud.google.com"  # renders an object for a signed-in user with access
IMAGE_SUFFIXES = (".png", ".jpg", ".jpeg", ".svg", ".gif")


def artifact_key(*parts: str) -> str:
    """A valid artifact key from free text: lowercase letters, digits and dashes."""
    return re.sub(r"[^a-z0-9]+", "-", "-".join(parts).lower()).strip("-")


def _split_gs(uri: str) -> tuple[str, str]:
    bucket, _, obj = uri.removeprefix("gs://").partition("/")
    return bucket, obj.strip("/")


def browser_url(uri: str, *, is_dir: bool = False) -> str:
    """Where a browser shows an artifact: the Cloud Console for gs://, file:// for a local path.

    ``gs://b/p/x.json`` -> ``https://console.cloud.google.com/storage/browser/_details/b/p/x.json`` (an object's
    page); a directory (or a bucket) -> ``https://console.cloud.google.com/storage/browser/b/p``.
    """
    if uri.startswith("gs://"):
        bucket, obj = _split_gs(uri)
        if is_dir or not obj:
            return f"{GCS_CONSOLE}/{bucket}/{quote(obj)}".rstrip("/")
        return f"{GCS_CONSOLE}/_details/{bucket}/{quote(obj)}"
    if uri.startswith(("http://", "https://", "file://")):
        return uri
    return Path(uri).expanduser().resolve().as_uri()


def image_url(uri: str) -> str | None:
    """An http(s) URL a browser can display the image from, or None (a local file: link it instead)."""
    if uri.startswith("gs://"):
        bucket, obj = _split_gs(uri)
        return f"{GCS_AUTHENTICATED}/{bucket}/{quote(obj)}"
    if uri.startswith(("http://", "https://")):
        return uri
    return None


def mlflow_run_url(tracking_uri: str | None, run_id: str | None) -> str | None:
    """The MLflow UI page of a run when the tracking URI is a server (http/https), else None."""
    if not run_id or not tracking_uri or not tracking_uri.startswith(("http://", "https://")):
        return None
    return f"{tracking_uri.rstrip('/')}/#/runs/{run_id}"


def _is_dir(ref: ArtifactRef) -> bool:
    if ref.uri.startswith("gs://"):
        return not Path(ref.path).suffix or ref.path.endswith(".zarr")
    return Path(ref.uri.removeprefix("file://")).is_dir()


def publish_links(refs: Iterable[ArtifactRef]) -> None:
    """A link artifact per artifact (images as image artifacts where the URI is browser-reachable)."""
    for ref in refs:
        if ref.path.lower().endswith(IMAGE_SUFFIXES) and (url := image_url(ref.uri)) is not None:
            create_image_artifact(image_url=url, description=f"{ref.stage}: {ref.path}")
            continue
        create_link_artifact(
            link=browser_url(ref.uri, is_dir=_is_dir(ref)),
            link_text=ref.path,
            description=f"{ref.stage}: {ref.path} ({ref.bytes:,} bytes, sha256 {ref.sha256[:12]})",
        )


def publish_files(run_dir: str, stage: str, rels: Iterable[str]) -> None:
    """Link (or show, where the URI has a URL) files inside a run's recorded artifacts, e.g. its PNGs."""
    from rtscore.storage import RunDir

    run = RunDir(run_dir)
    for rel in rels:
        if not run.remote and not run.path(rel).exists():
            continue
        uri = run.uri_of(rel)
        if rel.lower().endswith(IMAGE_SUFFIXES) and (url := image_url(uri)) is not None:
            create_image_artifact(image_url=url, description=f"{stage}: {rel}")
        else:
            create_link_artifact(link=browser_url(uri), link_text=rel, description=f"{stage}: {rel}")


def run_text(run_dir: str, rel: str, recorded: str | None = None) -> str:
    """A text file of a run for a summary, or a note why it is not shown: a summary never fails a stage.

    ``recorded`` is the manifest entry holding ``rel`` (a directory artifact); for a gs:// run it is staged
    into this worker's mirror first (a cached stage may have run on another worker).
    """
    from rtscore.storage import RunDir

    try:
        run = RunDir(run_dir)
        run.fetch(recorded or rel)
        return run.path(rel).read_text()
    except Exception as err:
        return f"_{rel} not shown: {type(err).__name__}: {err}_\n"


def publish_mlflow_link(tracking_uri: str | None, run_id: str | None, what: str) -> None:
    """A link artifact to an MLflow run (only for a tracking server: a local SQLite store has no URL)."""
    if (url := mlflow_run_url(tracking_uri, run_id)) is not None:
        create_link_artifact(link=url, link_text=f"MLflow: {what}", description=f"MLflow run {run_id}")


def publish_summary(
    key: str, title: str, refs: list[ArtifactRef], extra: Callable[[], str] | None = None, *, links: bool = True
) -> None:
    """The stage's markdown summary (what ran, its artifacts, key figures), then a link per artifact."""
    rows = "\n".join(f"| {r.stage} | `{r.path}` | {r.bytes:,} | `{r.sha256[:12]}` |" for r in refs)
    md = f"# {title}\n\n| stage | artifact | bytes | sha256 |\n|---|---|---|---|\n{rows}\n"
    if extra is not None:
        md += "\n" + extra()
    create_markdown_artifact(key=artifact_key(key), markdown=md, description=title)
    if links:
        publish_links(refs)


def publish_table(key: str, rows: list[dict[str, Any]], description: str) -> None:
    create_table_artifact(key=artifact_key(key), table=rows, description=description)


def report_tables(report_json: str) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """(mean ± std per ratio and metric, per-seed metrics) from the text of ``evaluation/test_report.json``
    (two empty tables if it is not JSON: see :func:`run_text`)."""
    try:
        doc = json.loads(report_json)
    except ValueError:
        return [], []
    aggregate = [
        {
            "ratio": ratio.replace("_", ":"),
            "metric": metric,
            "mean": _round(v.get("mean")),
            "std": _round(v.get("std")),
            "text": v.get("text", ""),
        }
        for ratio, metrics in doc.get("aggregate", {}).items()
        for metric, v in metrics.items()
        if isinstance(v, dict)
    ]
    per_seed = [
        {
            "seed": p["seed"],
            "ratio": ratio.replace("_", ":"),
            "threshold": _round(p.get("threshold")),
            "temperature": _round(p.get("temperature")),
            **{k: _round(v) for k, v in m.items() if isinstance(v, int | float)},
        }
        for p in doc.get("per_seed", [])
        for ratio, m in p.get("metrics", {}).items()
        if isinstance(m, dict)
    ]
    return aggregate, per_seed


def _round(v: Any) -> Any:
    """4 decimals; NaN and infinities (e.g. object precision without any detection) become empty cells."""
    if isinstance(v, float):
        return round(v, 4) if math.isfinite(v) else None
    return v


class Progress:
    """A progress artifact the pipeline advances stage by stage (0-100 %)."""

    def __init__(self, key: str, stages: list[str], description: str) -> None:
        self.stages, self.done = stages, 0
        self.id: UUID = create_progress_artifact(progress=0.0, key=artifact_key(key), description=description)

    def advance(self, stage: str) -> None:
        self.done += 1
        pct = round(100.0 * self.done / len(self.stages), 1)
        nxt = self.stages[self.done] if self.done < len(self.stages) else None
        update_progress_artifact(
            self.id, pct, description=f"{stage} done" + (f"; next: {nxt}" if nxt else "; pipeline finished")
        )
