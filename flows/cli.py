"""The `rts` command: every command of the project, one module (heavy imports only inside the command that
needs them, so that `rts --help` answers at once).

Library commands call rtscore directly; pipeline commands run the Prefect flows (an ephemeral local API unless
PREFECT_API_URL names a server). An error a user can act on (`rtscore.errors.PipelineError`) prints as one
line and exits 2; anything else is a bug and shows its traceback.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any, TypeVar

from pydantic import BaseModel

from flows.params import (
    TRAIN_SEED_DEPLOYMENT,
    DataParams,
    DistributedParams,
    MultiSeedParams,
    PipelineParams,
    RunParams,
    SeedStageParams,
    TrainSeedParams,
)
from rtscore.errors import PipelineError
from rtscore.storage import RunLayout, StorageError, check_writable
from rtscore.storage import absolute_location as absolute

M = TypeVar("M", bound=BaseModel)

GS_SUPPORT = (
    "gs:// is taken by --run of rts data, train, run, calibrate, evaluate-test and package build, and by "
    "--data-root of rts generate --source geotiff, and by --input and --output of rts map"
)


def _local_path(value: str) -> str:
    """argparse type of an option that takes a local path: a URI is refused, saying where gs:// is taken
    (instead of becoming the local path 'gs:/bucket/...')."""
    if "://" in value:
        raise argparse.ArgumentTypeError(
            f"{value} is a URI, this option takes a local path ({GS_SUPPORT}); copy it here first, "
            f"e.g. gcloud storage cp -r {value} ."
        )
    return value


def _local_output(value: str) -> str:
    """argparse type of a local output location: refused at once when it cannot be written."""
    _local_path(value)
    try:
        check_writable(value)
    except StorageError as err:
        raise argparse.ArgumentTypeError(str(err)) from None
    return value


def _rgb_bands(value: str) -> Any:
    """argparse type of --rgb-bands ``r,g,b[,alpha]`` (0-based band indexes) -> a RasterBandMap."""
    from pydantic import ValidationError

    from rtscore.config.binding import RasterBandMap

    try:
        bands = [int(v) for v in value.split(",")]
    except ValueError:
        bands = []
    if len(bands) not in (3, 4):
        raise argparse.ArgumentTypeError(f"{value!r}: expected r,g,b or r,g,b,alpha (0-based band indexes)")
    try:
        return RasterBandMap(rgb=bands[:3], alpha=bands[3] if len(bands) == 4 else None)
    except ValidationError as err:
        raise argparse.ArgumentTypeError(f"{value!r}: {err.errors()[0]['msg']}") from None


RGB_BANDS_HELP = (
    "0-based bands of R, G, B (and alpha) of input files laid out unlike the training rasters, e.g. 2,1,0 for "
    "Planet's B,G,R,NIR (alpha from the dataset mask) or 2,1,0,3; default: the package's (by colour interpretation)"
)


def _run_location(value: str) -> str:
    """argparse type of --run of a pipeline command: a gs:// URI, or a local directory that can be written."""
    if value.startswith("gs://"):
        return value
    return _local_output(value)


def _data_root(value: str) -> str:
    """argparse type of --data-root: a gs:// prefix or a local directory."""
    return value if value.startswith("gs://") else _local_path(value)


def _generate(args: argparse.Namespace) -> int:
    from rtscore.config import GenerationConfig, load_config
    from rtscore.config.generation import with_absolute_data_root

    cfg = with_absolute_data_root(load_config(GenerationConfig, args.config), Path(args.config).parent)
    source = args.source or cfg.source
    if source == "geotiff":
        from rtscore.data.geotiff import ingest_geotiffs

        root = args.data_root or (cfg.geotiff.data_root if cfg.geotiff else None)
        if not root:
            raise PipelineError("--source geotiff needs --data-root <dir> (or geotiff.data_root in the config)")
        attrs = ingest_geotiffs(
            cfg,
            Path(root),
            Path(args.output),
            overwrite=args.overwrite,
            restart=args.restart,
            progress=True,
            num_workers=args.workers,
        )
    else:
        from rtscore.data.generate import generate_synthetic

        attrs = generate_synthetic(
            cfg,
            Path(args.output),
            overwrite=args.overwrite,
            restart=args.restart,
            progress=True,
            num_workers=args.workers,
        )
    counts = attrs["counts"]
    print(
        f"wrote {args.output}: {counts['n_tiles']} tiles ({counts['n_positive']} positive, "
        f"{counts['n_negative']} negative, {counts['n_full_nodata']} full NoData), "
        f"prevalence {attrs['prevalence']['exact']:.5f}"
    )
    return 0


def _synth_geotiff(args: argparse.Namespace) -> int:
    from rtscore.config import GenerationConfig, load_config, load_pipeline_config
    from rtscore.config.base import read_yaml
    from rtscore.data.geotiff import write_synthetic_geotiffs

    doc = read_yaml(args.config)
    if isinstance(doc, dict) and "split" in doc:  # one split's generation config
        cfgs = [load_config(GenerationConfig, args.config)]
    else:  # a pipeline config: every split it generates, in one data root
        cfgs = [g for _, g in load_pipeline_config(args.config).data.generation.items()]
    summary = write_synthetic_geotiffs(cfgs, Path(args.output), overwrite=args.overwrite)
    print(
        f"wrote {summary['output']}: {summary['n_tiles']} tiles of splits {summary['split']} "
        f"({summary['n_positive']} positive, {summary['n_full_nodata']} full NoData) as GeoTIFFs"
    )
    return 0


def _tile(args: argparse.Namespace) -> int:
    from rtscore.config.tiling import load_tiling_config
    from rtscore.data.tiling import tile_scenes

    cfg = load_tiling_config(absolute(args.config))  # its paths absolute: the resume fingerprint holds them
    output = args.output or cfg.output
    if not output:
        raise PipelineError(f"{args.config}: no output; give --output <dir> (or output: in the config)")
    m = tile_scenes(cfg, Path(output), overwrite=args.overwrite)
    c = m.counts
    print(
        f"wrote {output}: {c.tiles} tiles ({c.positive} positive, {c.negative} negative; {m.resumed_tiles} kept from "
        f"an earlier run) in regions {m.regions}; {c.skipped_no_valid_pixels} cells without valid pixels skipped"
        + (f", {c.skipped_outside_regions} outside the regions" if c.skipped_outside_regions else "")
    )
    print(f"polygons: {c.polygons} in the inventory, {c.polygons_labelled} labelled whole in a tile")
    if c.polygons_outside_scenes:
        print(f"warning: {c.polygons_outside_scenes} polygon(s) touch no scene and were not tiled")
    return 0


def _stats(args: argparse.Namespace) -> int:
    from rtscore.data.normalization import compute_normalization_stats, write_normalization_stats

    extra = None
    clip = _clip_percentiles(args.clip)
    if args.config:
        from rtscore.config import load_pipeline_config

        cfg = load_pipeline_config(args.config)
        extra = cfg.channels.extra  # names and EXTRA bands: the store must have been written with this binding
        clip = clip or cfg.normalization.clip_percentiles
    out = Path(args.output) if args.output else Path(args.dataset).parent / "normalization_stats.json"
    check_writable(out)  # before the pass over the store, not after it
    stats = compute_normalization_stats(args.dataset, extra_channels=extra, clip_percentiles=clip, progress=True)
    write_normalization_stats(stats, out)
    print(json.dumps(stats.to_json(), indent=2))
    print(f"wrote {out}")
    return 0


def _clip_percentiles(values: Sequence[float] | None) -> tuple[float, float] | None:
    """``--clip LOW HIGH`` checked by the rule of normalization.clip_percentiles (one rule, one place)."""
    if values is None:
        return None
    from pydantic import ValidationError

    from rtscore.config.pipeline import NormalizationConfig

    low, high = values
    try:
        return NormalizationConfig(clip_percentiles=(low, high)).clip_percentiles
    except ValidationError as err:
        why = "; ".join(e["msg"].removeprefix("Value error, ") for e in err.errors())
        raise PipelineError(f"--clip {low:g} {high:g}: {why} (the rule of normalization.clip_percentiles)") from None


def _validate(args: argparse.Namespace) -> int:
    from rtscore.config import load_pipeline_config
    from rtscore.data.validation import validate_data

    cfg = load_pipeline_config(args.config)
    root = Path(args.dataset)
    stores = {s: root / f"{s}.zarr" for s in ("train", "val", "test") if (root / f"{s}.zarr").exists()}
    if not stores and (root / "zarr.json").exists():  # a single store
        from rtscore.data.store import read_store_attrs

        stores = {read_store_attrs(root)["split"]: root}
        root = root.parent
    stats = Path(args.stats) if args.stats else root / "normalization_stats.json"
    if not stats.exists() and (root.parent / "normalization_stats.json").exists():
        stats = root.parent / "normalization_stats.json"
    if not stats.exists():
        raise StorageError(f"normalization stats not found at {stats}; run `rts stats --dataset <train.zarr>` first")
    out = Path(args.output) if args.output else root / "validation"
    check_writable(out)
    report = validate_data(
        cfg, stores, stats, out, max_batches=args.max_batches, num_workers=args.workers, progress=True
    )
    for split, s in report["splits"].items():
        print(f"{split}: {s['n_usable']} usable tiles, {s['n_positive']} positive, prevalence {s['prevalence']:.5f}")
    for w in report["warnings"]:
        print(f"warning: {w}")
    print(f"validation passed; report in {out}")
    return 0


def _import_npz(args: argparse.Namespace) -> int:
    from rtscore.data.legacy_npz import import_npz

    attrs = import_npz(
        args.input, args.output, split=args.split, shard_tiles=args.shard_tiles, overwrite=args.overwrite, progress=True
    )
    print(f"wrote {args.output}: {attrs['counts']['n_tiles']} tiles")
    return 0


def _noise_floor(args: argparse.Namespace) -> int:
    from rtscore.config import load_pipeline_config
    from rtscore.train.noise_floor import measure_noise_floor, render_noise_floor

    cfg = load_pipeline_config(args.config)
    seed = cfg.training.seed if args.seed is None else args.seed
    report = measure_noise_floor(cfg, args.run, seed, repeats=args.repeats, draws_per_run=args.draws)
    print(render_noise_floor(report))
    return 0


def _profile_batch(args: argparse.Namespace) -> int:
    from rtscore.config import load_pipeline_config
    from rtscore.storage import atomic_write_text
    from rtscore.train.profile import profile_batch_sizes, render_profile

    cfg = load_pipeline_config(args.config)
    report = profile_batch_sizes(cfg, memory_cap_gib=args.max_memory_gb, max_batch=args.max_batch, steps=args.steps)
    md = render_profile(report)
    print(md)
    if args.output:
        atomic_write_text(Path(args.output), md)
        print(f"wrote {args.output}")
    return 0


def _package_verify(args: argparse.Namespace) -> int:
    """`rts package verify DIR`: audit a deployment package, load it and run one tile; 0 when every check passes."""
    from rtscore.package import render_verify_report, verify_package

    report = verify_package(
        Path(args.dir),
        device=getattr(args, "device", None) or "cpu",
        allow_fallback_threshold=bool(getattr(args, "allow_fallback_threshold", False)),
    )
    print(render_verify_report(report))
    return 0 if report.ok else 1


def _predict(args: argparse.Namespace) -> int:
    """`rts predict`: probabilities + mask COGs of a raster or a directory of rasters with a deployment package.

    Arguments: ``package`` (package dir), ``input`` (a .tif or a directory of .tif; ``*_extra.tif`` are EXTRA
    siblings), ``output`` (directory), ``stride`` (int or None: half a tile), ``device`` (default auto: the GPU
    when there is one, as calibration ran),
    ``extra`` (optional EXTRA raster for a single input; default ``<stem>_extra.tif`` next to each input),
    ``rgb_bands`` (a RasterBandMap replacing the package's band map, or None). Every input is checked against the
    package's raster contract before the first is predicted.
    """
    from rtscore.inference.predict import check_inputs, input_rasters, load_package, predict_raster

    files = input_rasters(args.input)
    extra = getattr(args, "extra", None)
    bands = getattr(args, "rgb_bands", None)
    if extra and len(files) > 1:
        raise PipelineError("--extra needs a single --input raster (directories use <stem>_extra.tif)")
    pkg = load_package(args.package, device=getattr(args, "device", None) or "auto")
    check_inputs(pkg, files, extra_tif=extra, rgb_bands=bands)  # every file, before any output is written
    for f in files:
        stride = getattr(args, "stride", None)
        out = predict_raster(pkg, f, args.output, stride=stride, extra_tif=extra, rgb_bands=bands, check_finite=False)
        skipped = f" ({out.skipped_windows} full-NoData skipped)" if out.skipped_windows else ""
        print(
            f"{f.name}: {out.windows} windows{skipped}, {out.positive_pixels:,} of {out.valid_pixels:,} valid "
            f"pixels >= threshold -> {out.prob.name}, {out.mask.name}, {out.manifest.name}"
        )
    return 0


def _drift(args: argparse.Namespace) -> int:
    """`rts drift`: input drift of new imagery against the package's normalization stats; 1 on a blocker.

    Arguments: ``package`` (package dir), ``input`` (a .tif or a directory of .tif), ``output`` (report dir),
    ``rgb_bands`` (a RasterBandMap replacing the package's band map, or None).
    """
    from rtscore.inference.drift import REPORT_MD, drift_report, render_markdown

    report = drift_report(args.package, args.input, args.output, rgb_bands=getattr(args, "rgb_bands", None))
    print(render_markdown(report), end="")
    print(f"wrote {Path(args.output) / REPORT_MD}")
    return 0 if report["ok"] else 1


def _chunk_size(value: str) -> int:
    """argparse type of `rts map --chunk-size`: a whole number >= 1, refused before the package is loaded."""
    try:
        size = int(value)
    except ValueError:
        size = 0
    if size < 1:
        raise argparse.ArgumentTypeError(f"{value!r}: expected a whole number of scenes >= 1")
    return size


def _map(args: argparse.Namespace) -> int:
    """`rts map`: a mapping campaign in process (rtscore.mapping.campaign); 1 when scenes failed (re-run retries)."""
    from rtscore.mapping.campaign import SUMMARY_MD, CampaignRoot, run_campaign

    s = run_campaign(args.package, args.input, args.output, args.chunk_size, allow_drift=args.allow_drift)
    print(f"{s['done']} done, {s['skipped_full_nodata']} skipped (full NoData), {s['failed']} failed of {s['scenes']}")
    print(f"wrote {CampaignRoot(args.output).uri_of(SUMMARY_MD)}; log {s['log']}")
    return 1 if s["failed"] else 0


# The flow parameters a command's options set (a parameter error names the option).
FLOW_OPTIONS = {"seed": "--seed", "seeds": "--seeds", "deterministic": "--deterministic", "config": "--config"}


def _start_flow(params: RunParams, first_stage: str) -> None:
    """Before a flow command runs its flow, in this order, each refusal one message (exit 2): its config and run
    location (a local one writable; gs://: credentials and bucket), without Prefect or torch (:mod:`flows.preflight`,
    a second or two), then the inputs of the first stage it runs (:func:`flows.common.check_inputs`); only then
    Prefect's API: no telemetry from the temporary local server (offline machines; it also races SQLite at
    start-up), and that server started up front (a generous start-up limit, stopped even when this process is
    killed: :func:`flows.common.start_local_api`) unless PREFECT_API_URL names a server."""
    from flows.preflight import check_run

    check_run(params)
    os.environ.setdefault("PREFECT_SERVER_ANALYTICS_ENABLED", "false")
    from flows.common import check_inputs, start_local_api

    check_inputs(first_stage, params)
    start_local_api()


def _flow_params(model: type[M], **values: Any) -> M:
    """The parameters of a flow command; a value the model refuses is one line naming its option."""
    from flows.preflight import flow_params

    return flow_params(model, FLOW_OPTIONS, **values)


def _data(args: argparse.Namespace) -> int:
    params = _flow_params(
        DataParams, config=str(Path(args.config).resolve()), run_dir=absolute(args.run), refresh=args.refresh
    )
    _start_flow(params, "generate-dataset")
    from flows.data import data_pipeline

    refs = data_pipeline(params)
    for name, ref in refs.named().items():
        print(f"{name:20s} {ref.uri}")
    print(f"data pipeline finished; validation report: {params.run_dir}/{RunLayout.VALIDATION_REPORT_MD.at()}")
    return 0


def _train(args: argparse.Namespace) -> int:
    config, run = str(Path(args.config).resolve()), absolute(args.run)
    if args.seeds and args.seed is not None:
        raise PipelineError("--seed and --seeds: give one (--seeds trains several seeds under one parent run)")
    params: MultiSeedParams | TrainSeedParams
    if args.seeds:
        params = _flow_params(MultiSeedParams, config=config, run_dir=run, seeds=args.seeds, fresh=args.fresh)
    else:
        params = _flow_params(TrainSeedParams, config=config, run_dir=run, seed=args.seed, fresh=args.fresh)
    _start_flow(params, "train-seed")
    from flows.train import multi_seed_train, train_seed

    results = multi_seed_train(params) if isinstance(params, MultiSeedParams) else [train_seed(params)]
    for r in results:
        res = r.result
        print(
            f"seed {res.seed}: best val_realistic_pr_auc_geomean {res.best_metric:.4f} at epoch {res.best_epoch} "
            f"({res.epochs_run} epochs) -> {res.seed_dir}"
        )
    return 0


def _run_dir(args: argparse.Namespace) -> str:
    """--run (a local path, made absolute, or a gs:// URI kept as is), or artifacts/<config file stem>."""
    return absolute(args.run or str(Path("artifacts") / Path(args.config).stem))


def _print_training(results: list[Any]) -> None:
    for r in results:
        print(
            f"seed {r.result.seed:<6d} best val_realistic_pr_auc_geomean {r.result.best_metric:.4f} "
            f"(epoch {r.result.best_epoch}) {r.result.seed_dir}"
        )


def _print_calibration(cal: Any) -> None:
    d = cal.deployment
    print(f"calibration: tta {d.tta}, scales {d.scales}; shipped seed {cal.shipped_seed}")
    print(f"  TTA gate:   {cal.summary.tta_reason}")
    print(f"  scale gate: {cal.summary.scales_reason}")
    for p in cal.summary.seeds:
        note = "" if p.target_reached else " (WARNING: target precision not reachable: max-F1 fallback threshold)"
        print(
            f"  seed {p.seed}: T = {p.temperature:.3f}, threshold {p.threshold:.4f} "
            f"(val precision {p.precision:.3f}, recall {p.recall:.3f}){note}"
        )


def _pipeline(args: argparse.Namespace) -> int:
    run_dir = _run_dir(args)
    params = _flow_params(
        PipelineParams,
        config=str(Path(args.config).resolve()),
        run_dir=run_dir,
        seeds=args.seeds,
        refresh=args.refresh,
        skip_generation=args.skip_generation,
        deterministic=args.deterministic,
        execution=args.execution,
        distributed=DistributedParams(deployment=args.train_deployment),
    )
    _start_flow(params, "generate-dataset")
    from flows.pipeline import pipeline

    out = pipeline(params)
    _print_training(out.training)
    _print_calibration(out.calibration)
    print()
    print(out.test.table)
    print(f"\ntest report: {run_dir}/{RunLayout.TEST_REPORT_MD.at()}")
    print(f"deployment package: {out.package.uri}")
    return 0


def _calibrate(args: argparse.Namespace) -> int:
    params = _stage_params(args)
    _start_flow(params, "logit-cache")
    from flows.calibrate import calibrate

    cal = calibrate(params)
    _print_calibration(cal)
    print(f"deployment config: {_run_dir(args)}/{RunLayout.DEPLOYMENT_CONFIG.at()}")
    return 0


def _evaluate_test(args: argparse.Namespace) -> int:
    params = _stage_params(args)
    _start_flow(params, "evaluate-test")
    from flows.calibrate import evaluate_test

    rep = evaluate_test(params)
    print(rep.table)
    print(f"\ntest report: {_run_dir(args)}/{RunLayout.TEST_REPORT_MD.at()}")
    return 0


def _package_build(args: argparse.Namespace) -> int:
    params = _stage_params(args)
    _start_flow(params, "package")
    from flows.calibrate import package

    ref = package(params)
    print(f"deployment package: {ref.uri}")
    return 0


def _stage_params(args: argparse.Namespace) -> SeedStageParams:
    """The SeedStageParams of a stage command (calibrate, evaluate-test, package build)."""
    return _flow_params(
        SeedStageParams,
        config=str(Path(args.config).resolve()),
        run_dir=_run_dir(args),
        seeds=args.seeds,
        refresh=args.refresh,
    )


def _stage_args(p: argparse.ArgumentParser, *, seeds_help: str) -> None:
    p.add_argument(
        "--config", type=_local_path, required=True, help="pipeline config YAML (e.g. configs/quickstart.yaml)"
    )
    p.add_argument(
        "--run", type=_run_location, help="run directory or gs:// URI (default: artifacts/<config file name>)"
    )
    p.add_argument("--seeds", type=int, nargs="+", help=seeds_help)
    p.add_argument("--refresh", action="store_true", help="recompute (ignore cached results)")


def parser() -> argparse.ArgumentParser:
    """Every `rts` command."""
    p = argparse.ArgumentParser(prog="rts", description="RTS segmentation pipeline (rtscore + Prefect flows).")
    sub = p.add_subparsers(dest="command", required=True, metavar="COMMAND")
    g = sub.add_parser("generate", help="generate a tile store (one split) from a generation config")
    g.add_argument(
        "--source", default=None, choices=["synthetic", "geotiff"], help="data source (default: the config's source)"
    )
    g.add_argument("--config", type=_local_path, required=True, help="generation config YAML (configs/generation/...)")
    g.add_argument("--output", type=_local_output, required=True, help="output store, e.g. datasets/train.zarr")
    g.add_argument("--workers", type=int, default=None, help="worker processes (default: processing.num_workers)")
    g.add_argument("--overwrite", action="store_true", help="replace an existing store")
    g.add_argument("--restart", action="store_true", help="discard an interrupted generation instead of resuming")
    g.add_argument(
        "--data-root", type=_data_root, help="--source geotiff: root with PLANET-RGB/, EXTRA/, labels/, metadata.csv"
    )
    g.set_defaults(func=_generate)

    sg = sub.add_parser("synth-geotiff", help="write the synthetic scenes of a generation config as GeoTIFFs")
    sg.add_argument(
        "--config",
        type=_local_path,
        required=True,
        help="a generation config (one split) or a pipeline config (all its splits)",
    )
    sg.add_argument(
        "--output", type=_local_output, required=True, help="data root to create (PLANET-RGB/, EXTRA/, labels/, ...)"
    )
    sg.add_argument("--overwrite", action="store_true", help="replace an existing data root")
    sg.set_defaults(func=_synth_geotiff)

    tl = sub.add_parser("tile", help="cut scenes and an RTS polygon inventory into the tile layout (DATA_LAYOUT.md)")
    tl.add_argument(
        "--config", type=_local_path, required=True, help="tiling config YAML (configs/tiling/example.yaml)"
    )
    tl.add_argument(
        "--output", type=_local_output, help="data root to write (default: output of the config); re-runs resume"
    )
    tl.add_argument(
        "--overwrite",
        action="store_true",
        help="delete an earlier run's tiles and start over (default: resume; a run of other code, settings or "
        "inputs is set aside)",
    )
    tl.set_defaults(func=_tile)

    s = sub.add_parser("stats", help="normalization stats of a train store (train split only)")
    s.add_argument("--dataset", type=_local_path, required=True, help="the train store (.zarr)")
    s.add_argument("--config", type=_local_path, help="pipeline config (selects channels.extra and clipping)")
    s.add_argument(
        "--clip",
        type=float,
        nargs=2,
        metavar=("LOW", "HIGH"),
        help="percentile clipping, 0 <= LOW < HIGH <= 100 (default: normalization.clip_percentiles of --config)",
    )
    s.add_argument("--output", type=_local_output, help="default: normalization_stats.json next to the store")
    s.set_defaults(func=_stats)

    v = sub.add_parser("validate", help="check the datasets through the DataLoader and write a report")
    v.add_argument(
        "--dataset", type=_local_path, required=True, help="a directory with <split>.zarr stores, or one store"
    )
    v.add_argument("--config", type=_local_path, required=True, help="pipeline/training config YAML")
    v.add_argument("--stats", type=_local_path, help="normalization_stats.json (default: next to the datasets)")
    v.add_argument("--output", type=_local_output, help="report directory (default: <dataset>/validation)")
    v.add_argument("--max-batches", type=int, default=None, help="check at most this many batches per split")
    v.add_argument("--workers", type=int, default=0, help="DataLoader workers")
    v.set_defaults(func=_validate)

    i = sub.add_parser("import-npz", help="convert a legacy batched .npz dataset into a Zarr tile store")
    i.add_argument(
        "--input", type=_local_path, required=True, help="legacy dataset dir (with exact_masks/ or metadata.json)"
    )
    i.add_argument("--output", type=_local_output, required=True, help="output store (.zarr)")
    i.add_argument("--split", required=True, choices=["train", "val", "test"], help="split the data belongs to")
    i.add_argument("--shard-tiles", type=int, default=32, help="tiles per shard")
    i.add_argument("--overwrite", action="store_true", help="replace an existing store")
    i.set_defaults(func=_import_npz)

    n = sub.add_parser("noise-floor", help="repeat validation on a seed's best checkpoint; suggest min_delta")
    n.add_argument("--config", type=_local_path, required=True, help="pipeline config YAML")
    n.add_argument("--run", type=_local_path, required=True, help="run directory with the trained seed")
    n.add_argument(
        "--seed", type=int, default=None, help="which seed's best_deployment.pth (default: training.seed of the config)"
    )
    n.add_argument("--repeats", type=int, default=5, help="validation passes on the same checkpoint")
    n.add_argument("--draws", type=int, default=4, help="random negative subsets per pass (the old method)")
    n.set_defaults(func=_noise_floor)

    b = sub.add_parser("profile-batch", help="largest batch size that fits the configured model on this device")
    b.add_argument(
        "--config", type=_local_path, required=True, help="pipeline config YAML (model, tile size, precision)"
    )
    b.add_argument("--max-memory-gb", type=float, default=None, help="on CPU: treat peak RSS growth above this as OOM")
    b.add_argument("--max-batch", type=int, default=512, help="stop the search at this batch size")
    b.add_argument("--steps", type=int, default=2, help="timed training steps per batch size")
    b.add_argument("--output", type=_local_output, help="also write the markdown report here")
    b.set_defaults(func=_profile_batch)
    pr = sub.add_parser("predict", help="probability and mask COGs of GeoTIFFs from a deployment package")
    pr.add_argument(
        "--package", type=_local_path, required=True, help="deployment package directory (rts package build)"
    )
    pr.add_argument(
        "--input", type=_local_path, required=True, help="a GeoTIFF (R, G, B [, alpha]) or a directory of them"
    )
    pr.add_argument(
        "--output", type=_local_output, required=True, help="directory for <name>_prob.tif and <name>_mask.tif"
    )
    pr.add_argument("--stride", type=int, default=None, help="window stride in pixels (default: half a tile)")
    pr.add_argument(
        "--extra", type=_local_path, default=None, help="EXTRA raster of a single input (default: <name>_extra.tif)"
    )
    pr.add_argument(
        "--device",
        default="auto",
        help="auto (default: the GPU when there is one, as calibration ran), cpu, cuda or cuda:N",
    )
    pr.add_argument("--rgb-bands", type=_rgb_bands, default=None, metavar="R,G,B[,ALPHA]", help=RGB_BANDS_HELP)
    pr.set_defaults(func=_predict)

    dr = sub.add_parser("drift", help="compare new imagery with the package's normalization stats (guide §4.1)")
    dr.add_argument("--package", type=_local_path, required=True, help="deployment package directory")
    dr.add_argument(
        "--input", type=_local_path, required=True, help="a GeoTIFF or a directory of them (<name>_extra.tif siblings)"
    )
    dr.add_argument(
        "--output", type=_local_output, required=True, help="directory for drift_report.json and drift_report.md"
    )
    dr.add_argument("--rgb-bands", type=_rgb_bands, default=None, metavar="R,G,B[,ALPHA]", help=RGB_BANDS_HELP)
    dr.set_defaults(func=_drift)
    mp = sub.add_parser("map", help="map a region: a resumable campaign of rts predict over many scenes, objects")
    mp.add_argument("--package", type=_local_path, required=True, help="deployment package directory")
    mp.add_argument("--input", required=True, help="directory of GeoTIFF scenes, gs://bucket/prefix or scene list CSV")
    mp.add_argument(
        "--output",
        type=_run_location,
        required=True,
        help="campaign directory or gs://bucket/prefix (log, scenes, objects)",
    )
    mp.add_argument("--chunk-size", type=_chunk_size, default=50, help="scenes per chunk (default 50)")
    mp.add_argument("--allow-drift", action="store_true", help="map even when the drift check finds a blocker")
    mp.set_defaults(func=_map)
    d = sub.add_parser("data", help="run the data-pipeline flow (generate -> stats -> validate) into a run dir")
    d.add_argument(
        "--config", type=_local_path, required=True, help="pipeline config YAML (e.g. configs/quickstart.yaml)"
    )
    d.add_argument(
        "--run", type=_run_location, required=True, help="run directory or gs:// URI, e.g. artifacts/quickstart"
    )
    d.add_argument("--refresh", action="store_true", help="recompute every stage (ignore cached results)")
    d.set_defaults(func=_data)

    t = sub.add_parser("train", help="train one seed (train-seed flow) or several (multi-seed-train flow)")
    t.add_argument("--config", type=_local_path, required=True, help="pipeline config YAML")
    t.add_argument(
        "--run", type=_run_location, required=True, help="run directory (or gs:// URI) with the data stages' outputs"
    )
    t.add_argument(
        "--seed",
        type=int,
        default=None,
        help="seed of a single-seed run; overrides training.seed of the config, which is the default",
    )
    t.add_argument("--seeds", type=int, nargs="+", help="train these seeds in sequence under one parent run")
    t.add_argument("--fresh", action="store_true", help="start over instead of resuming from resume_latest.pth")
    t.set_defaults(func=_train)

    q = sub.add_parser(
        "run",
        aliases=["pipeline"],
        help="the full pipeline: data -> training -> calibrate -> evaluate-test -> package",
    )
    _stage_args(q, seeds_help="override training.seeds")
    q.add_argument("--skip-generation", action="store_true", help="reuse the run's existing datasets")
    q.add_argument(
        "--deterministic",
        action=argparse.BooleanOptionalAction,
        default=None,
        help="override training.deterministic of the config",
    )
    q.add_argument(
        "--execution",
        choices=("local", "distributed"),
        default="local",
        help="local: train the seeds in this process (default); distributed: one train-seed flow run per seed "
        "on --train-deployment (needs PREFECT_API_URL of a server with workers)",
    )
    q.add_argument(
        "--train-deployment",
        default=TRAIN_SEED_DEPLOYMENT,
        help=f"deployment of a distributed run's seeds (default {TRAIN_SEED_DEPLOYMENT})",
    )
    q.set_defaults(func=_pipeline)

    c = sub.add_parser("calibrate", help="logit caches, TTA/scale gates, temperature and threshold (calibrate flow)")
    _stage_args(c, seeds_help="trained seeds to calibrate together (default: every seed trained in the run)")
    c.set_defaults(func=_calibrate)

    e = sub.add_parser("evaluate-test", help="Test-Realistic with the frozen deployment config, mean ± std")
    _stage_args(e, seeds_help="calibrated seeds (default: the seeds of the last calibration)")
    e.set_defaults(func=_evaluate_test)

    k = sub.add_parser("package", help="build or verify the deployment package")
    ksub = k.add_subparsers(dest="package_command", required=True, metavar="{build,verify}")
    kb = ksub.add_parser("build", help="assemble <run>/package/ from the shipped seed (package flow)")
    _stage_args(kb, seeds_help="the seeds calibrated together (default: the seeds of the last calibration)")
    kb.set_defaults(func=_package_build)
    kv = ksub.add_parser("verify", help="audit a package without unpickling, then load it and run one tile")
    kv.add_argument("dir", type=_local_path, help="package directory")
    kv.add_argument("--device", default="cpu", help="device for the one-tile forward pass (default cpu)")
    kv.add_argument(
        "--allow-fallback-threshold",
        action="store_true",
        help="accept a max-F1 fallback threshold (deployment threshold_source: max_f1_fallback) instead of failing",
    )
    kv.set_defaults(func=_package_verify)
    return p


class _CliHandler(logging.StreamHandler):
    """The commands' stdout handler, marked so that it is added once."""

    _rts_cli = True


def _log_to_stdout() -> None:
    """Library progress (the ``rtscore`` loggers) on stdout, one line per message, as the commands print."""
    logger = logging.getLogger("rtscore")
    if not any(getattr(h, "_rts_cli", False) for h in logger.handlers):
        handler = _CliHandler(sys.stdout)
        handler.setFormatter(logging.Formatter("%(message)s"))
        logger.addHandler(handler)
    logger.setLevel(logging.INFO)
    logger.propagate = False  # Prefect's console handler on the root would print every line twice


def error_message(err: PipelineError) -> str:
    """The error's own message. An error raised in a DataLoader worker comes back re-raised with the worker's
    whole traceback as its message ("Caught X in DataLoader worker process 0. Original Traceback ..."): the
    message is its last line(s), after the exception's name."""
    text = str(err)
    if text.startswith("Caught ") and "Original Traceback" in text:
        kind = type(err)
        for marker in (f"{kind.__module__}.{kind.__qualname__}: ", f"{kind.__name__}: "):
            at = text.rfind(marker)
            if at >= 0:
                return text[at + len(marker) :].strip()
    return text


def run(p: argparse.ArgumentParser, argv: Sequence[str] | None = None) -> int:
    """Parse and dispatch: a PipelineError prints as one line (exit 2); Ctrl-C says how to resume."""
    args = p.parse_args(argv)
    _log_to_stdout()
    try:
        return int(args.func(args))
    except PipelineError as err:
        print(f"rts {args.command}: error: {error_message(err)}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print(f"rts {args.command}: interrupted; re-run the same command to resume", file=sys.stderr)
        return 130


def main(argv: Sequence[str] | None = None) -> int:
    return run(parser(), argv)


if __name__ == "__main__":
    sys.exit(main())
