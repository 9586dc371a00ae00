"""What the Prefect UI shows of a run: summaries, tables, images, links to artifacts and MLflow, progress.

Every artifact a flow publishes is made here; a flow module calls one ``publish_<stage>`` function after
its stage. Artifact keys (lowercase letters, digits, dashes) are given to the summaries, tables and images,
so that the UI's Artifacts page keeps their history; links are attached to the flow run only.

A flow run shows one card per key, the latest: a retried run (the UI's Retry runs the same flow run again) makes
its cards again, and the ``create_*_artifact`` functions every flow module publishes with (those of
:mod:`tasks.artifacts`, imported here) delete the run's earlier card of the same key once the new one is made. The
Artifacts page keeps one version per run of a key.

Images show inline for every run: a local run's PNG goes into a markdown artifact as a ``data:image/png``
URI (a browser opens no ``file://`` link from a web page), a gs:// run's as an image artifact of its
``storage.cloud.google.com`` URL (shown to a signed-in user with access to the bucket).
"""

from __future__ import annotations

import base64
import contextlib
import json
import math
import mimetypes
import posixpath
import re
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path
from typing import Any, cast
from urllib.parse import quote
from uuid import UUID

from prefect.artifacts import update_progress_artifact

from flows.render import NOT_AVAILABLE, render_calibration_markdown, render_training_markdown
from rtscore import evaluation
from rtscore.config import PipelineConfig
from rtscore.data.splits.regions import read_split_result
from rtscore.data.store.format import read_store_attrs
from rtscore.data.tiling.run import TilingManifest
from rtscore.evaluation import TestReport, ratio_label, render_test_markdown
from rtscore.report import md_table
from rtscore.stages import ArtifactRef, CalibrationResult, TestResult, TrainResult
from rtscore.storage import RunDir, RunLayout
from tasks.artifacts import (
    create_image_artifact,
    create_link_artifact,
    create_markdown_artifact,
    create_progress_artifact,
    create_table_artifact,
)

GCS_CONSOLE = "https://console.cloud.google.com/storage/browser"
GCS_AUTHENTICATED = "https://storage.cloud.google.com"  # renders an object for a signed-in user with access
IMAGE_SUFFIXES = (".png", ".jpg", ".jpeg", ".svg", ".gif")
MAX_INLINE_IMAGE_BYTES = 5_000_000  # larger images are linked (the artifact lives in the Prefect database)
_IMAGE_REF = re.compile(r"!\[([^\]]*)\]\(([^)\s]+)\)")  # ![alt](target) in markdown


# ------------------------------------------------------------------------------------------ addresses
def in_a_run() -> bool:
    """Whether this code runs inside a Prefect flow or task run. An artifact made outside one belongs to no run (no
    page of the UI shows it) and Prefect deprecates making it (a FutureWarning): publishers called from plain Python
    (a flow's body called directly, a test) skip it."""
    from prefect.context import FlowRunContext, TaskRunContext

    return FlowRunContext.get() is not None or TaskRunContext.get() is not None


def artifact_key(*parts: str) -> str:
    """A valid artifact key from free text: lowercase letters, digits and dashes."""
    return re.sub(r"[^a-z0-9]+", "-", "-".join(parts).lower()).strip("-")


def file_key(stage: str, rel: str) -> str:
    """The key of a file's card: the stage, then the file's run-relative path without its suffix
    (``calibrate-calibration-seed-1-pr-curves``): every card titled, a stage's cards next to each other, and
    each file's card of every run under one key in the Artifacts page."""
    return artifact_key(stage, posixpath.splitext(rel)[0])


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
    """An http(s) URL a browser can display the image from, or None (a local file: see :func:`image_src`)."""
    if uri.startswith("gs://"):
        bucket, obj = _split_gs(uri)
        return f"{GCS_AUTHENTICATED}/{bucket}/{quote(obj)}"
    if uri.startswith(("http://", "https://")):
        return uri
    return None


def image_src(run: RunDir, rel: str) -> str | None:
    """What an ``<img>`` of the UI loads a run's image from: its https URL for a gs:// run, else the file
    itself as a ``data:`` URI; None if the local file is missing or too large to inline."""
    if run.remote:
        return image_url(run.uri_of(rel))
    path = run.path(rel)
    if not path.is_file() or path.stat().st_size > MAX_INLINE_IMAGE_BYTES:
        return None
    mime = mimetypes.guess_type(path.name)[0] or "image/png"
    return f"data:{mime};base64,{base64.b64encode(path.read_bytes()).decode('ascii')}"


def mlflow_run_url(tracking_uri: str | None, run_id: str | None) -> str | None:
    """The MLflow UI page of a run when the tracking URI is a server (http/https), else None."""
    if not run_id or not tracking_uri or not tracking_uri.startswith(("http://", "https://")):
        return None
    return f"{tracking_uri.rstrip('/')}/#/runs/{run_id}"


def _is_dir(run: RunDir, ref: ArtifactRef) -> bool:
    if run.remote:
        return not Path(ref.path).suffix or ref.path.endswith(".zarr")
    return run.path(ref.path).is_dir()


def _is_image(rel: str) -> bool:
    return rel.lower().endswith(IMAGE_SUFFIXES)


# ------------------------------------------------------------------------------------------ building blocks
def publish_image(run_dir: str, stage: str, rel: str) -> None:
    """Show an image of the run (see the module docstring); a link where it cannot be inlined."""
    run = RunDir(run_dir)
    if not run.remote and not run.path(rel).is_file():
        return
    src = image_src(run, rel)
    if src is None:  # a local image too large to inline: no file:// link (a browser refuses it); listed in the summary
        return
    key = file_key(stage, rel)
    if run.remote:
        create_image_artifact(image_url=src, key=key, description=f"{stage}: {rel}")
    else:
        create_markdown_artifact(key=key, markdown=f"![{rel}]({src})\n", description=f"{stage}: {rel}")


def publish_links(run_dir: str, refs: Iterable[ArtifactRef]) -> None:
    """An artifact per recorded artifact: images shown (:func:`publish_image`); of a gs:// run anything else a
    titled link to its Cloud Console page. A local run's other files get no link (a browser opens no ``file://``
    link from a web page): the stage summary's table lists them with their size and sha256."""
    run = RunDir(run_dir)
    for ref in refs:
        if _is_image(ref.path):
            publish_image(run_dir, ref.stage, ref.path)
            continue
        if not run.remote:
            continue
        create_link_artifact(
            key=file_key(ref.stage, ref.path),
            link=browser_url(ref.uri, is_dir=_is_dir(run, ref)),
            link_text=ref.path,
            description=f"{ref.stage}: {ref.path} ({ref.bytes:,} bytes, sha256 {ref.sha256[:12]})",
        )


def publish_mlflow_link(tracking_uri: str | None, run_id: str | None, what: str) -> None:
    """A link artifact to an MLflow run (only for a tracking server: a local SQLite store has no URL)."""
    if (url := mlflow_run_url(tracking_uri, run_id)) is not None:
        create_link_artifact(
            key=artifact_key("mlflow", what), link=url, link_text=f"MLflow: {what}", description=f"MLflow run {run_id}"
        )


def run_text(run_dir: str, rel: str, recorded: str | None = None) -> str:
    """A text file of a run for a summary, or a note why it is not shown: a summary never fails a stage.

    ``recorded`` is the manifest entry holding ``rel`` (a directory artifact); for a gs:// run it is staged
    into this worker's mirror first (a cached stage may have run on another worker).
    """
    try:
        run = RunDir(run_dir)
        run.fetch(recorded or rel)
        return run.path(rel).read_text()
    except Exception as err:
        return f"_{rel} not shown: {type(err).__name__}: {err}_\n"


def run_markdown(run_dir: str, rel: str, recorded: str | None = None) -> str:
    """A markdown report of a run (:func:`run_text`) with its relative images made visible in the UI."""
    return inline_images(run_text(run_dir, rel, recorded), run_dir, posixpath.dirname(rel))


def inline_images(md: str, run_dir: str, base: str) -> str:
    """Replace each ``![alt](x.png)`` relative to ``base`` (a directory of the run) by the image's
    :func:`image_src`, or by a note where it cannot be shown."""
    run = RunDir(run_dir)

    def replace(m: re.Match[str]) -> str:
        alt, target = m.groups()
        if target.startswith(("http://", "https://", "data:")):
            return m.group(0)
        rel = posixpath.normpath(posixpath.join(base, target))
        src = image_src(run, rel)
        return f"![{alt}]({src})" if src else f"_{rel}: image not shown (missing or larger than inline limit)_"

    return _IMAGE_REF.sub(replace, md)


def publish_summary(
    key: str, title: str, refs: list[ArtifactRef], extra: Callable[[], str] | None = None, *, run_dir: str = ""
) -> None:
    """The stage's markdown summary (what ran, its artifacts, key figures), then an artifact per artifact
    (:func:`publish_links`) when ``run_dir`` is given."""
    table = md_table(
        ["stage", "artifact", "bytes", "sha256"],
        [[r.stage, f"`{r.path}`", f"{r.bytes:,}", f"`{r.sha256[:12]}`"] for r in refs],
    )
    md = f"# {title}\n\n" + _block(table)
    if extra is not None:
        md += "\n" + extra()
    create_markdown_artifact(key=artifact_key(key), markdown=md, description=title)
    if run_dir:
        publish_links(run_dir, refs)


def _block(table: list[str]) -> str:
    """A table's lines as a block of a summary, newline-ended; a table without rows keeps the blank line after its
    separator that these summaries have always had."""
    return "\n".join(table if len(table) > 2 else [*table, ""]) + "\n"


def publish_markdown(key: str, md: str, description: str) -> None:
    create_markdown_artifact(key=artifact_key(key), markdown=md, description=description)


def publish_table(key: str, rows: list[dict[str, Any]], description: str) -> None:
    create_table_artifact(key=artifact_key(key), table=rows, description=description)


def cell(v: Any) -> Any:
    """A table cell: floats to 4 decimals; NaN and infinities (undefined, e.g. the std of one seed, or the
    object precision without any detection) shown as such, never as a number."""
    if isinstance(v, float):
        return round(v, 4) if math.isfinite(v) else NOT_AVAILABLE
    return v


# ------------------------------------------------------------------------------------------ data stages
def publish_tiling(manifest: TilingManifest) -> None:
    """What `rts tile` wrote: tiles per class and region, what was skipped, the polygons tiled, and the run's
    warnings (thin splits, downsampling without `average`, a derivation that fails on the tiles written)."""
    c = manifest.counts
    regions = _block(md_table(["region", "tiles"], list(manifest.regions.items())))
    md = (
        f"# Tiles of {manifest.output}\n\n{c.tiles} tiles ({c.positive} positive, {c.negative} negative; "
        f"{manifest.resumed_tiles} kept from an earlier run) of {c.candidate_tiles} grid cells: "
        f"{c.skipped_no_valid_pixels} without valid pixels, {c.skipped_sparse} under min_valid_fraction, "
        f"{c.skipped_outside_regions} outside the regions.\n\n"
        f"Polygons: {c.labels_line()}.\n\n{regions}"
    )
    if manifest.warnings:
        md += "\n## Warnings\n\n" + "".join(f"- {w}\n" for w in manifest.warnings)
    create_markdown_artifact(key=artifact_key("tile-scenes"), markdown=md, description="Tiles written by rts tile")


def publish_datasets(run_dir: str, refs: list[ArtifactRef]) -> None:
    publish_summary(
        "generate-dataset",
        "Generated datasets",
        refs,
        lambda: _datasets_md(run_dir, refs) + derived_split_md(run_dir),
        run_dir=run_dir,
    )


def publish_stats(run_dir: str, ref: ArtifactRef) -> None:
    publish_summary("normalization-stats", "Normalization stats", [ref], lambda: _stats_md(run_dir), run_dir=run_dir)


def publish_validation(run_dir: str, ref: ArtifactRef) -> None:
    publish_summary("validate-data", "Data validation", [ref], lambda: _validation_md(run_dir), run_dir=run_dir)
    publish_image(run_dir, "validate-data", RunLayout.VALIDATION_SAMPLES.at())


def publish_data_pipeline(run_dir: str, refs: dict[str, ArtifactRef], datasets: list[ArtifactRef]) -> None:
    publish_summary(
        "data-pipeline",
        f"Data pipeline: {run_dir}",
        list(refs.values()),
        lambda: _datasets_md(run_dir, datasets) + derived_split_md(run_dir) + "\n" + _validation_md(run_dir),
        run_dir=run_dir,
    )
    publish_image(run_dir, "validate-data", RunLayout.VALIDATION_SAMPLES.at())


def _datasets_md(run_dir: str, refs: list[ArtifactRef]) -> str:
    """Key figures of the generated stores (from their attributes)."""
    rows = []
    for ref in refs:
        try:
            a = read_store_attrs(RunDir(run_dir).path(ref.path))
        except Exception:  # a summary never fails a stage
            continue
        seed = a.seed if "seed" in a.model_fields_set else "?"  # a GeoTIFF store records none
        rows.append([a.split, a.source, seed, a.tile_size, ", ".join(a.channel_names), f"{ref.bytes / 1e6:.1f}"])
    return "\n".join(md_table(["split", "source", "seed", "tile size", "channels", "MB"], rows)) + "\n"


def derived_split_md(run_dir: str) -> str:
    """The split derived for a GeoTIFF root without splits.yaml and its warnings ('' when splits were given)."""
    run = RunDir(run_dir)
    rel = RunLayout.DERIVED_SPLITS_SUMMARY.at()
    try:
        run.fetch(rel)
        derived = read_split_result(run.path(rel))
    except Exception as err:  # a summary never fails a stage
        return f"\n_{rel} not shown: {type(err).__name__}: {err}_\n"
    if derived is None:
        return ""
    warnings = "".join(f"- **warning**: {w}\n" for w in derived.warnings)
    return f"\n### Split derived from {derived.derived_from} (no splits.yaml)\n\n{derived.summary()}\n{warnings}"


def _stats_md(run_dir: str) -> str:
    text = run_text(run_dir, RunLayout.NORMALIZATION_STATS.at())
    with contextlib.suppress(ValueError):
        text = json.dumps(json.loads(text), indent=2)
    return "```json\n" + text.rstrip() + "\n```\n"


def _validation_md(run_dir: str) -> str:
    return run_markdown(run_dir, RunLayout.VALIDATION_REPORT_MD.at(), recorded=RunLayout.VALIDATION.at())


# ------------------------------------------------------------------------------------------ training
def publish_training(
    run_dir: str, cfg: PipelineConfig, results: list[TrainResult], key: str, *, parent_run_id: str | None = None
) -> None:
    """Per-seed table, a summary with mean ± std, the seeds' artifacts (curves shown), MLflow links."""
    seeds = [r.result for r in results]
    rows = [
        {
            "seed": s.seed,
            "best_epoch": s.best_epoch,
            "best_val_realistic_pr_auc_geomean": cell(s.best_metric),
            "epochs_run": s.epochs_run,
            "stopped_early": s.stopped_early,
            "attempts": _attempts_cell(r),
            "mlflow_run_id": s.mlflow_run_id or "",
        }
        for r, s in zip(results, seeds, strict=True)
    ]
    publish_table(key, rows, "Per-seed training results")
    figures = render_training_markdown(results)
    refs = [ref for r in results for ref in r.artifacts]
    publish_summary(f"{key}-summary", f"Training: {key}", refs, lambda: figures, run_dir=run_dir)
    publish_mlflow_link(cfg.mlflow.tracking_uri, parent_run_id, "multi-seed parent run")
    for s in seeds:
        publish_mlflow_link(cfg.mlflow.tracking_uri, s.mlflow_run_id, f"seed {s.seed}")


def _attempts_cell(result: TrainResult) -> str:
    """``1``, or e.g. ``2 (epochs 1-3 interrupted, 4-12 completed)``: what each attempt of the seed recorded."""
    if result.attempts is None or not result.attempts.attempts:
        return ""
    runs = result.attempts.attempts
    if len(runs) == 1:
        return "1"
    spans = [
        f"{a.resumed_from_epoch + 1}-{a.last_epoch} {a.status}" if a.epochs_recorded else f"none recorded {a.status}"
        for a in runs
    ]
    return f"{len(runs)} (epochs {', '.join(spans)})"


# ------------------------------------------------------------------------------------------ after training
def publish_calibration(run_dir: str, caches: list[ArtifactRef], result: CalibrationResult) -> None:
    publish_table(
        "calibration",
        [{k: cell(v) for k, v in p.model_dump().items()} for p in result.summary.seeds],
        f"Per-seed temperature and threshold; shipped seed {result.shipped_seed}",
    )
    report = run_markdown(run_dir, RunLayout.CALIBRATION_REPORT_MD.at())
    publish_summary(
        "calibrate",
        "Calibration",
        caches + result.artifacts,
        lambda: render_calibration_markdown(result) + "\n" + report,
        run_dir=run_dir,
    )


def report_tables(report: TestReport) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """(mean ± std per ratio and metric, per-seed metrics per ratio) of a test report; an undefined mean or
    std (NaN) is ``n/a``."""
    aggregate = [
        {"ratio": ratio_label(tag), "metric": metric, "mean": cell(s.mean), "std": cell(s.std), "text": s.text}
        for tag, metrics in report.aggregate.items()
        for metric, s in metrics.items()
    ]
    per_seed = [
        {
            "seed": p.seed,
            "ratio": ratio_label(tag),
            "threshold": cell(p.threshold),
            "temperature": cell(p.temperature),
            **{k: cell(v) for k, v in m.items()},
        }
        for p in report.per_seed
        for tag, m in p.metrics.items()
    ]
    return aggregate, per_seed


def results_table(report: TestReport) -> list[dict[str, Any]]:
    """The guide's results table (:func:`rtscore.evaluation.results_table`: a row per metric, a column per ratio,
    cells ``mean ± std`` over seeds) as a table artifact's rows."""
    heads, rows = evaluation.results_table(report.aggregate)
    return [{"metric": label, **dict(zip(heads, cells, strict=True))} for label, *cells in rows]


def _seeds_note(report: TestReport) -> str:
    if len(report.seeds) == 1:
        return f"seed {report.seeds[0]} only: std undefined"
    return f"seeds {', '.join(map(str, report.seeds))}"


def publish_test_report(run_dir: str, result: TestResult) -> None:
    """The test report's tables (mean ± std per ratio and metric, per seed, per region and latitude band: the
    rows of test_report.md's) and its markdown summary."""
    report = result.report
    aggregate, per_seed = report_tables(report)
    publish_table(
        "test-report-aggregate", aggregate, f"Test-Realistic: mean ± std per ratio and metric ({_seeds_note(report)})"
    )
    publish_table("test-report-per-seed", per_seed, "Test-Realistic: per seed and ratio")
    for table in (report.by_region, report.by_latitude):
        if table is not None and table.groups:
            heads, rows = evaluation.group_table(table)
            publish_table(
                f"test-report-by-{table.by}",
                [dict(zip(heads, r, strict=True)) for r in rows],
                f"Test-Realistic per {evaluation.GROUP_HEADINGS[table.by]}: mean ± std over seeds "
                f"({_seeds_note(report)})",
            )
    publish_summary(
        "test-report",
        "Test-Realistic, mean ± std over seeds",
        result.artifacts,
        lambda: render_test_markdown(report),
        run_dir=run_dir,
    )


def publish_package(run_dir: str, ref: ArtifactRef) -> None:
    sums = run_text(run_dir, RunLayout.PACKAGE_SUMS.at(), recorded=RunLayout.PACKAGE.at())
    publish_summary(
        "package", "Deployment package", [ref], lambda: "## SHA256SUMS\n\n```\n" + sums + "```\n", run_dir=run_dir
    )


# ------------------------------------------------------------------------------------------ the whole pipeline
def publish_pipeline(run_dir: str, calibration: CalibrationResult, test: TestResult, package: ArtifactRef) -> None:
    """What the pipeline run itself shows: the final test table (mean ± std over seeds), the shipped seed's
    operating point and the deployment package (a link), next to its progress card."""
    report = test.report
    publish_table(
        "rts-pipeline-test-results",
        results_table(report),
        f"{run_dir}: Test-Realistic, mean ± std over seeds ({_seeds_note(report)})",
    )
    where = browser_url(package.uri, is_dir=True)
    shown = f"[{package.path}]({where})" if RunDir(run_dir).remote else f"`{package.path}`"
    d = calibration.deployment
    md = (
        f"# RTS pipeline: {run_dir}\n\n"
        f"- deployment package: {shown} (`{package.uri}`, sha256 `{package.sha256[:12]}`)\n"
        f"- shipped seed **{calibration.shipped_seed}**: threshold {cell(d.threshold)}, temperature "
        f"{cell(d.temperature)}, TTA {d.tta}, scales {d.scales}\n\n" + render_test_markdown(report)
    )
    create_markdown_artifact(key="rts-pipeline-summary", markdown=md, description=f"RTS pipeline: {run_dir}")
    if RunDir(run_dir).remote:  # a local package: its path is in the summary (no file:// link a browser refuses)
        create_link_artifact(
            key="rts-pipeline-package",
            link=where,
            link_text="deployment package",
            description=f"package: {package.uri}",
        )


class Progress:
    """A progress artifact the pipeline advances stage by stage (0-100 %); the stage that failed, if one did."""

    def __init__(self, key: str, stages: list[str], description: str) -> None:
        self.stages, self.done = stages, 0
        # Prefect types its sync/async-dispatching functions as `T | Coroutine[..., T]`; called sync, it is T.
        self.id = cast(UUID, create_progress_artifact(progress=0.0, key=artifact_key(key), description=description))

    def advance(self, stage: str) -> None:
        self.done += 1
        pct = round(100.0 * self.done / len(self.stages), 1)
        nxt = self.stages[self.done] if self.done < len(self.stages) else None
        update_progress_artifact(
            self.id, pct, description=f"{stage} done" + (f"; next: {nxt}" if nxt else "; pipeline finished")
        )

    @contextlib.contextmanager
    def failing(self) -> Iterator[None]:
        """The stages run inside: if one raises, the card says it failed (the run's final state, not "next: x")."""
        try:
            yield
        except Exception:
            with contextlib.suppress(Exception):  # the card never hides the error
                done = ", ".join(self.stages[: self.done]) or "none"
                stage = self.stages[min(self.done, len(self.stages) - 1)]
                pct = round(100.0 * self.done / len(self.stages), 1)
                update_progress_artifact(self.id, pct, description=f"{stage} failed (done: {done})")
            raise
