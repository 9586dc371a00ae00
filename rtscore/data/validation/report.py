"""The data validation's result: its checks, per-split summaries and warnings as one typed report, and the files
it is written as (report.json, report.md, the sample grid)."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, Field

from rtscore.config.pipeline import PipelineConfig
from rtscore.data.splits.blocking import BlockingReport
from rtscore.data.splits.regions import SplitResult
from rtscore.data.validation.sample_grid import write_sample_grid
from rtscore.report import md_table
from rtscore.storage import atomic_write_json, atomic_write_text
from rtscore.storage.layout import SAMPLES, VALIDATION_REPORT_MD_NAME, VALIDATION_REPORT_NAME

SPLITS = ("train", "val", "test")


class Check(BaseModel):
    """One check's outcome; ``split`` and ``tile_id`` say where it failed."""

    name: str
    passed: bool
    detail: str
    split: str | None = None
    tile_id: str | None = None


class SplitSummary(BaseModel):
    """What one split's store holds and how much of it went through its DataLoader."""

    n_tiles: int = 0
    n_usable: int = 0
    n_positive: int = 0
    n_negative: int = 0
    n_full_nodata_excluded: int = 0
    prevalence: float = 0.0
    regions: list[str] = Field(default_factory=list)
    n_mapped_negative: int | None = Field(
        None,
        description="Usable tiles holding a pixel of a mapped Negative (background) polygon of the inventory, the "
        "guide's hard negatives (a positive tile can hold one too); None: the store records no inventory ids "
        "(synthetic, or ingested before they were recorded), and reports of earlier versions.",
    )
    batches_checked: int = 0
    tiles_checked: int = 0


class NormalizedMoments(BaseModel):
    """Per-channel mean and std of the normalized valid train pixels (4 decimals)."""

    channels: list[str]
    mean: list[float]
    std: list[float]


class SamplerStage(BaseModel):
    """The training loader at the first epoch of one curriculum stage: its batch plan's positive tiles."""

    epoch: int
    neg_per_pos: float
    batches: int
    batch_size: int
    positive_tiles_per_batch: tuple[int, int]  # (min, max)
    realised_neg_per_pos: float | None = Field(
        None,
        description="Negatives per positive tile over the epoch's whole plan (the configured ratio exactly where "
        "the epoch's tiles allow, otherwise within one tile); none in reports of earlier versions.",
    )
    emptied_by_augmentation: list[str] = Field(
        default_factory=list,
        description="Tiles of the checked batch whose sample augmentation left without a valid pixel (valid on "
        "disk: a warning, not a failure; all-255 labels add nothing to the loss).",
    )


class ValidationReport(BaseModel):
    """report.json: every check, the per-split summaries, the warnings (val or test with fewer positive tiles than
    their floors, a derived split's own warnings, samples emptied by augmentation), the normalized moments and
    the training loader's stages."""

    status: Literal["passed", "failed"]
    derived_split: SplitResult | None
    checks: list[Check]
    warnings: list[str]
    splits: dict[str, SplitSummary]
    blocking: BlockingReport | None = Field(
        None,
        description="Spatial blocking by geometry: the least ground distance and pairs flagged of every pair of splits "
        "(train<->val, train<->test, val<->test, each additional root<->val and <->test), the "
        "closest tile pairs and the pairs too close (splits.min_distance_m); not measured for stores without tile "
        "footprints (synthetic). None in reports of earlier versions.",
    )
    normalized_train: NormalizedMoments | None
    training_batches: list[SamplerStage]
    normalization_stats: str
    mask_type: str
    channels: list[str]

    def render_markdown(self) -> str:
        """report.md: the split table, the normalized moments, the training loader, every check, the warnings."""
        lines = [f"# Data validation: {self.status.upper()}", ""]
        lines += _splits_table(self.splits)
        if self.blocking is not None:
            lines += ["", *_blocking_lines(self.blocking)]
        norm = self.normalized_train
        if norm is not None:
            lines += [
                "",
                "Normalized train pixels (valid only): "
                + ", ".join(
                    f"{c} {m:+.3f}/{s:.3f}" for c, m, s in zip(norm.channels, norm.mean, norm.std, strict=True)
                ),
            ]
        if self.training_batches:
            lines += ["", *_training_loader_lines(self.training_batches)]
        lines += ["", *_checks_table(self.checks)]
        if self.warnings:
            lines += ["", "Warnings:", *[f"- {w}" for w in self.warnings]]
        if self.derived_split is not None:
            derived = self.derived_split
            lines += ["", f"Split derived from {derived.derived_from} (no splits.yaml there):", "", derived.summary()]
        lines += ["", f"![samples]({SAMPLES})", ""]
        return "\n".join(lines)


def _splits_table(splits: Mapping[str, SplitSummary]) -> list[str]:
    """report.md's first table: what each split's store holds (tiles, usable, positive, negative, excluded, those
    with a mapped Negative polygon of the inventory) and its prevalence and regions."""
    return md_table(
        [
            "split",
            "tiles",
            "usable",
            "positive",
            "negative",
            "full NoData excluded",
            "with mapped negatives",
            "prevalence",
            "regions",
        ],
        [
            [
                split,
                s.n_tiles,
                s.n_usable,
                s.n_positive,
                s.n_negative,
                s.n_full_nodata_excluded,
                "not recorded" if s.n_mapped_negative is None else s.n_mapped_negative,
                f"{s.prevalence:.5f}",
                len(s.regions),
            ]
            for split, s in splits.items()
        ],
    )


def _training_loader_lines(stages: list[SamplerStage]) -> list[str]:
    """report.md's training loader: a row per curriculum stage's first epoch, its ratio asked and realised, its
    plan's positive tiles per batch and the samples augmentation emptied."""
    batches = []
    for r in stages:
        lo, hi = r.positive_tiles_per_batch
        realised = "" if r.realised_neg_per_pos is None else f"1:{r.realised_neg_per_pos:.3f}"
        batches.append(
            [
                r.epoch,
                f"1:{r.neg_per_pos:g}",
                realised,
                r.batches,
                r.batch_size,
                f"{lo}, {hi}",
                len(r.emptied_by_augmentation),
            ]
        )
    header = ["epoch", "neg:pos", "realised over the epoch", "batches", "batch size"]
    header += ["positive tiles per batch (min, max)", "emptied by augmentation"]
    return ["Training loader (balanced curriculum sampler, first epoch of each stage):", "", *md_table(header, batches)]


def _checks_table(checks: list[Check]) -> list[str]:
    """report.md's checks, in the order they ran: where each failed (split / tile) and its detail."""
    rows = []
    for c in checks:
        where = c.split or ""
        if c.tile_id:
            where += f" / {c.tile_id}"
        rows.append([c.name, where, "pass" if c.passed else "FAIL", c.detail])
    return md_table(["check", "split", "result", "detail"], rows)


def _blocking_lines(b: BlockingReport) -> list[str]:
    """report.md's spatial blocking by geometry: a line per pair kind (least ground distance, closest pair, pairs
    flagged), and the pairs too close."""
    if not b.measured:
        return [f"Spatial blocking by geometry: not measured: {b.note}."]
    roots = [s for s, split in b.sources.items() if split == "train" and s != "train"]
    train_data = "a train tile" + (f" (or a tile of {', '.join(roots)})" if roots else "")
    lines = [
        f"Spatial blocking by geometry (tile footprints in {b.crs}; no two tiles of different splits may overlap, "
        f"and {train_data} must keep {b.buffer_m:g} m of ground from every val/test tile):",
        "",
    ]
    rows: list[list[object]] = []
    for d in b.distances:
        c = d.closest
        if c is None:
            rows.append([d.kind.replace("<->", " <-> "), "(no tiles)", "", "", 0])
            continue
        dist = "overlap" if c.overlap else f"{c.distance_m:.1f} m"
        rows.append([d.kind.replace("<->", " <-> "), dist, c.tile_a, c.tile_b, d.n_too_close])
    header = ["pair", "least ground distance", "closest tile (first)", "closest tile (second)", "pairs flagged"]
    lines += md_table(header, rows)
    if b.too_close:
        more = f" (first {len(b.too_close)} of {b.n_too_close})" if b.n_too_close > len(b.too_close) else ""
        lines += ["", f"Pairs too close{more}:", *[f"- {p.describe()}" for p in b.too_close]]
    return lines


class CheckLog:
    """The checks and warnings gathered while validating, in order."""

    def __init__(self) -> None:
        self.checks: list[Check] = []
        self.warnings: list[str] = []

    def add(self, name: str, ok: bool, detail: str, split: str | None = None, tile: str | None = None) -> bool:
        self.checks.append(Check(name=name, passed=bool(ok), detail=detail, split=split, tile_id=tile))
        return ok

    @property
    def failed(self) -> list[Check]:
        return [c for c in self.checks if not c.passed]


def write_report(report: ValidationReport, stores: Mapping[str, Path], cfg: PipelineConfig, out_dir: Path) -> None:
    """report.json, report.md and samples.png, each written atomically."""
    out_dir.mkdir(parents=True, exist_ok=True)
    atomic_write_json(out_dir / VALIDATION_REPORT_NAME, report.model_dump(mode="json"))
    atomic_write_text(out_dir / VALIDATION_REPORT_MD_NAME, report.render_markdown())
    write_sample_grid({k: v for k, v in stores.items() if k in SPLITS}, cfg, out_dir / SAMPLES)
