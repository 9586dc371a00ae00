"""Test helpers importable by worker processes (spawn re-imports them by module name)."""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from rtscore.data.store.attrs import StoreAttrs
from rtscore.data.store.format import StoreLayout
from rtscore.data.store.writer import base_attrs, write_store
from rtscore.data.tiles import KIND_CODES, RawTile
from tests.conftest import make_tile

PROJECT_ROOT = Path(__file__).resolve().parents[1]

SIZE = 32


class ListProducer:
    """Deterministic tiles; optionally fails at one shard start, and logs which ranges it produced."""

    def __init__(self, n: int, *, extra: int = 0, fail_at: int | None = None, log: Path | None = None) -> None:
        self.n, self.extra, self.fail_at, self.log = n, extra, fail_at, log

    def batches(self, start: int, stop: int) -> Iterator[tuple[list[RawTile], list[int]]]:
        if self.log is not None:
            with self.log.open("a") as f:
                f.write(f"{start}\n")
        if self.fail_at is not None and start == self.fail_at:
            raise RuntimeError("simulated crash")
        for a in range(start, stop, 3):  # batches of 3, smaller than a shard
            tiles = [
                make_tile(
                    i,
                    SIZE,
                    positive=i % 2 == 0,
                    extra=self.extra,
                    nodata_rows=4 if i % 5 == 0 else 0,
                    region=f"r{i % 3}",
                )
                for i in range(a, min(a + 3, stop))
            ]
            yield tiles, [KIND_CODES["positive" if t.n_objects else "negative"] for t in tiles]


class FullNoData:
    """Tiles without a valid pixel (alpha 0 everywhere), like a split cut from a scene's NoData border."""

    def __init__(self, n: int, size: int = SIZE, extra: int = 0) -> None:
        self.n, self.size, self.extra = n, size, extra

    def batches(self, start: int, stop: int) -> Iterator[tuple[list[RawTile], list[int]]]:
        tiles = [
            make_tile(i, self.size, positive=False, extra=self.extra, nodata_rows=self.size) for i in range(start, stop)
        ]
        yield tiles, [KIND_CODES["full_nodata"]] * len(tiles)


def write_full_nodata_store(path: Path, n: int, *, size: int = SIZE, extra: list[str] | None = None) -> Path:
    """A published store of ``n`` full-NoData tiles (split val) of ``size`` pixels and EXTRA channels ``extra``."""
    names = list(extra or [])
    layout = StoreLayout(n_tiles=n, tile_size=size, extra_channel_names=tuple(names), shard_tiles=4)
    attrs = base_attrs(
        split="val", source="test", tile_size=size, extra=names, mask_types=["exact", "noisy"], dataset_version="t"
    )
    attrs.update({"config": {}, "config_hash": "nodata", "seed": 0, "shard_tiles": 4})
    write_store(FullNoData(n, size, len(names)), layout, path, attrs)
    return path


def _layout(n: int, extra: int = 0, shard: int = 4) -> StoreLayout:
    return StoreLayout(
        n_tiles=n, tile_size=SIZE, extra_channel_names=tuple(f"e{i}" for i in range(extra)), shard_tiles=shard
    )


def _attrs(extra: int = 0, chash: str = "h1", split: str = "train") -> dict:
    a = base_attrs(
        split=split,
        source="test",
        tile_size=SIZE,
        extra=[f"e{i}" for i in range(extra)],
        mask_types=["exact", "noisy"],
        dataset_version="t",
    )
    a.update({"config": {}, "config_hash": chash, "seed": 0, "shard_tiles": 4})
    return a


def store_attrs_doc(**fields: Any) -> dict[str, Any]:
    """The attribute document of a test store of no tiles (nothing written), ``fields`` replacing its entries."""
    counts = {"n_tiles": 0, "n_positive": 0, "n_negative": 0, "n_full_nodata": 0, "n_regions": 0, "regions": []}
    return {**_attrs(), "counts": counts, "prevalence": {"exact": 0.0, "noisy": 0.0}, **fields}


def write_test_store(
    path: Path, n: int = 10, *, extra: int = 0, split: str = "train", format_version: int | None = None
) -> StoreAttrs:
    """A small published store of :func:`make_tile` tiles (no synthetic renderer involved); ``format_version``
    1 writes the layout of stores published before format 2 (one array per kind of pixel)."""
    layout = _layout(n, extra)
    if format_version is not None:
        layout = dataclasses.replace(layout, format_version=format_version)
    return write_store(ListProducer(n, extra=extra), layout, path, _attrs(extra, split=split))


def tiny_pipeline_config(tile: int = 64, extra: bool = True) -> dict[str, Any]:
    """A pipeline config (as YAML data) with three tiny synthetic splits, fast enough for flow tests."""

    def gen(split: str, seed: int, pos: int, neg: int, regions: list[str]) -> dict[str, Any]:
        return {
            "split": split,
            "seed": seed,
            "tile_size": tile,
            "synthetic": {
                "n_positive": pos,
                "n_negative": neg,
                "n_full_nodata": 1,
                "regions": regions,
                "extra_channels": ["ndvi"] if extra else [],
                "generation_batch_size": 4,
            },
            "store": {"shard_tiles": 8},
        }

    return {
        "data": {
            "tile_size": tile,
            "generation": {
                "train": gen("train", 1, 8, 8, ["ta", "tb"]),
                "val": gen("val", 2, 3, 9, ["va", "vb"]),
                "test": gen("test", 3, 3, 9, ["sa"]),
            },
            "loader": {"num_workers": 0, "persistent_workers": False, "pin_memory": False},
        },
        "channels": {"extra": [{"name": "ndvi", "band": 0}] if extra else []},
        "splits": {"min_test_positives": 1},
        "training": {"device": "cpu", "precision": "fp32", "batch_size": 4, "max_epochs": 4},
        "lr_schedule": {"freeze_backbone_epochs": 1, "warmup_epochs": 1},
        "model": {"architecture": "unet", "backbone": "resnet18", "encoder_weights": None},
        "deployment": {"precision": "fp32"},
        # Models trained for a few steps rarely reach the target precision: these runs opt into the max-F1
        # fallback (recorded in deployment_config.yaml, flagged by `rts package verify` and the test report).
        "calibration": {"allow_max_f1_fallback": True},
    }


def quick_training(data: dict[str, Any]) -> dict[str, Any]:
    """``data`` (a pipeline config as YAML data, changed in place and returned) trained for one epoch of one step and
    calibrated over one candidate (no TTA, scale 1.0): for flow tests whose assertions hold whatever the model learnt
    and whichever candidates calibration weighed. What epochs and candidates do is tests/train's and tests/calibrate's;
    the whole pipeline with tests/flows/configs.py's training and the default candidates is
    tests/flows/test_server_integration.py's, the stages after training with those candidates test_single_seed.py's."""
    data["training"].update({"max_epochs": 1, "steps_per_epoch": 1})
    data["lr_schedule"] = {"freeze_backbone_epochs": 0, "warmup_epochs": 0}
    data.setdefault("calibration", {}).update({"tta_candidates": ["none"], "scale_candidates": [1.0]})
    return data


def make_data_run(run: Path, cfg: Any) -> Path:
    """Run the data stages (generate every split, normalization stats) into ``run``."""
    from rtscore import stages

    for split in ("train", "val", "test"):
        stages.generate_dataset(str(run), cfg, split)
    stages.normalization_stats(str(run), cfg)
    return run


def copy_run(src: Path, dst: Path) -> Path:
    """A private copy of a run directory, its manifest pointing at the copy."""
    import shutil

    shutil.copytree(src, dst)
    (dst / "manifest.json").write_text((dst / "manifest.json").read_text().replace(str(src), str(dst)))
    return dst


def fake_trained_seed(run: Path, cfg: Any, seed: int, best_metric: float = 0.5) -> None:
    """Seeded untrained EMA weights and a run summary for ``seed``, recorded as the train-seed stage would."""
    import torch

    from rtscore.models import build_model
    from rtscore.stages.spec import record
    from rtscore.stages.train import SPEC
    from rtscore.storage import RunDir, RunLayout
    from rtscore.train.checkpoint import save_best
    from rtscore.train.result import SeedSummary

    torch.manual_seed(seed)
    save_best(run / RunLayout.SEED_DIR.at(seed=seed), build_model(cfg.model, cfg.channels).state_dict())
    summary = SeedSummary(
        seed=seed,
        epochs_run=0,
        stopped_early=False,
        best_epoch=0,
        best_val_realistic_pr_auc_geomean_smoothed=best_metric,
        last_validation={},
        overfitting={},
        model=cfg.model,
        mlflow_run_id=None,
    )
    (run / RunLayout.SEED_SUMMARY.at(seed=seed)).write_text(summary.model_dump_json(indent=2) + "\n")
    for entry in (RunLayout.BEST_WEIGHTS, RunLayout.SEED_SUMMARY):
        record(SPEC, RunDir(run), entry.at(seed=seed), cfg)


def calibrated_deployment(**fields: Any) -> Any:
    """A DeploymentConfig as calibration freezes it: threshold/temperature from ``fields`` (defaults 0.5 / 1.0),
    threshold source 'target_precision' unless given, and ``calibrated_with`` recording its own numerics."""
    from rtscore.config.deployment import DeploymentConfig

    fields = {"threshold": 0.5, "temperature": 1.0, "threshold_source": "target_precision", **fields}
    dep = DeploymentConfig.model_validate(fields)
    return dep if dep.calibrated_with is not None else dep.model_copy(update={"calibrated_with": dep.numerics()})


def write_raster(path: Path, data: Any, *, transform: Any, interp: list[str] | None = None, **profile: Any) -> Path:
    """A (bands, h, w) GeoTIFF in EPSG:3857 (``profile`` overrides any creation key), colour interpretation
    ``interp`` (rasterio ColorInterp names) when given."""
    import rasterio
    from rasterio.enums import ColorInterp

    kw: dict[str, Any] = {
        "driver": "GTiff",
        "height": data.shape[1],
        "width": data.shape[2],
        "count": data.shape[0],
        "dtype": data.dtype.name,
        "crs": "EPSG:3857",
        "transform": transform,
        **profile,
    }
    with rasterio.open(path, "w", **kw) as f:
        f.write(data)
        if interp is not None:
            f.colorinterp = [ColorInterp[c] for c in interp]
    return path


def flip_byte(path: Path, keep_mtime: bool) -> None:
    """Corrupt one byte in place, size unchanged; with ``keep_mtime`` the mtime is set back as it was."""
    import os

    st = path.stat()
    data = bytearray(path.read_bytes())
    data[len(data) // 2] ^= 0xFF
    path.write_bytes(bytes(data))
    if keep_mtime:
        os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns))
        assert path.stat().st_mtime_ns == st.st_mtime_ns and path.stat().st_size == st.st_size


class CodeEdits:
    """Simulated edits of project files: their bytes, as every code identity reads them
    (:func:`rtscore.identity.code.source_bytes`), change; the real files are untouched."""

    def __init__(self, monkeypatch: Any) -> None:
        from rtscore.identity import code as identity_code

        self.files: set[Path] = set()
        original = identity_code.source_bytes
        monkeypatch.setattr(
            identity_code,
            "source_bytes",
            lambda path: original(path) + (b"\n# edited\n" if path in self.files else b""),
        )

    def edit(self, rel: str) -> None:
        self.files.add((PROJECT_ROOT / rel).resolve())
        self._clear()

    def undo(self, rel: str) -> None:
        self.files.discard((PROJECT_ROOT / rel).resolve())
        self._clear()

    @staticmethod
    def _clear() -> None:
        from rtscore.stages import code_fingerprint

        code_fingerprint.cache_clear()


def executed_stages(monkeypatch: Any) -> list[str]:
    """Every stage that records an artifact from now on (a stage served from the cache records nothing)."""
    from rtscore.storage import RunDir

    seen: list[str] = []
    original = RunDir.record

    def record(self: RunDir, rel: str, stage: str, config_hash: str, **kw: object) -> object:
        seen.append(stage)
        return original(self, rel, stage, config_hash, **kw)  # type: ignore[arg-type]

    monkeypatch.setattr(RunDir, "record", record)
    return seen


def derived_split_root(path: Path) -> Path:
    """A GeoTIFF data root of 40 tiles in 20 regions, 32 px, EXTRA ndvi, without splits.yaml (the pipeline
    derives the split, the same for every split)."""
    from rtscore.config.generation import GenerationConfig
    from rtscore.data.geotiff.synth import write_synthetic_geotiffs

    synthetic = GenerationConfig(
        split="train",
        tile_size=32,
        seed=3,
        synthetic={
            "n_positive": 20,
            "n_negative": 20,
            "regions": [f"r{i:02d}" for i in range(20)],
            "extra_channels": ["ndvi"],
        },
        store={"shard_tiles": 8, "write_noisy_labels": False},
    )
    write_synthetic_geotiffs(synthetic, path)
    (path / "splits.yaml").unlink()
    return path


def geotiff_pipeline_config(root: str) -> dict[str, Any]:
    """The tiny pipeline config (as YAML data) with every split ingested from the GeoTIFF data root ``root``."""
    data = tiny_pipeline_config(tile=32)
    data["splits"] = {"min_test_positives": 2}
    data["data"]["generation"] = {
        s: {
            "split": s,
            "tile_size": 32,
            "source": "geotiff",
            "geotiff": {"data_root": root, "extra_channels": [{"name": "ndvi", "band": 0}]},
        }
        for s in ("train", "val", "test")
    }
    return data


def alter_weights_tensor(weights: Path) -> str:
    """Change one value of a tensor of a ``torch.save`` zip archive in place (torch stores members uncompressed):
    the archive still opens and loads, but that member no longer matches its CRC-32. Returns the member's name."""
    import struct
    import zipfile

    with zipfile.ZipFile(weights) as z:
        member = next(i for i in z.infolist() if "/data/" in i.filename and i.file_size >= 8)
    raw = bytearray(weights.read_bytes())
    name_len, extra_len = struct.unpack_from("<HH", raw, member.header_offset + 26)  # the local file header's
    raw[member.header_offset + 30 + name_len + extra_len + 3] ^= 0x10
    weights.write_bytes(bytes(raw))
    return member.filename


@contextmanager
def logged(name: str, level: int = logging.WARNING) -> Iterator[list[str]]:
    """The messages logger ``name`` emits at ``level`` or above inside the block, from a handler on that logger
    itself (seen even after the CLI stopped the ``rtscore`` loggers from propagating to pytest's handler)."""
    messages: list[str] = []

    class _Collect(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            messages.append(record.getMessage())

    logger = logging.getLogger(name)
    handler = _Collect(level)
    logger.addHandler(handler)
    try:
        yield messages
    finally:
        logger.removeHandler(handler)


def count_audits(monkeypatch: Any) -> list[Path]:
    """The package paths audited from now on (each run of the checks `rts package verify` shares with loading)."""
    import rtscore.package.verify as verify

    audits: list[Path] = []
    real = verify.run_audit

    def counting(path: str | Path, **kw: Any) -> Any:
        audits.append(Path(path))
        return real(path, **kw)

    monkeypatch.setattr(verify, "run_audit", counting)
    return audits


def small_test_report(seeds: list[int]) -> Any:
    """A TestReport of ``seeds`` (PR-AUC 0.80, 0.82, ... at 1:200 and one undefined metric), for renderers and
    readers of test reports."""
    import math

    from rtscore.config.deployment import DeploymentConfig
    from rtscore.evaluation import SeedTestResult, TestReport

    per_seed = [
        SeedTestResult(
            seed=s,
            threshold=0.5,
            temperature=1.2,
            metrics={"1_200": {"pr_auc": 0.8 + 0.02 * i, "x": math.nan}},
            recall_by_size=[],
            n_pos_tiles=3,
            n_neg_tiles=5,
        )
        for i, s in enumerate(seeds)
    ]
    return TestReport.from_seeds(per_seed, DeploymentConfig(threshold=0.5, temperature=1.2), [0.3])
