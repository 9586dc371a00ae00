"""The library commands of `rts` (generate, tile, stats, predict, map, ...): each takes its parameter model
(flows/cli/command_params.py) and calls rtscore directly; heavy imports inside each, so `rts --help` stays instant.
Each returns the command's exit status."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path
from typing import TYPE_CHECKING

from flows.cli.command_params import (
    ArtsCheckParams,
    ArtsExportParams,
    DriftParams,
    GenerateStoreParams,
    GpuCheckParams,
    ImportNpzParams,
    NoiseFloorParams,
    PredictParams,
    ProfileBatchParams,
    ReviewServeParams,
    StatsParams,
    SynthGeotiffParams,
    ValidateParams,
    VerifyParams,
    WarpParams,
)
from flows.params import SPLITS, TileParams
from flows.params.mapping import MapParams
from flows.params.review import ReviewExportParams, ReviewIngestParams
from rtscore.errors import PipelineError
from rtscore.storage import RunLayout, StorageError, check_writable

if TYPE_CHECKING:
    from rtscore.diagnostics.gpu_check import GpuCheckOptions


def generate(p: GenerateStoreParams) -> int:
    from rtscore.config import GenerationConfig, load_config
    from rtscore.config.generation import with_absolute_data_root

    cfg = with_absolute_data_root(load_config(GenerationConfig, p.config), Path(p.config).parent)
    source = p.source or cfg.source
    if source == "geotiff":
        from rtscore.data.geotiff.ingest import ingest_geotiffs

        root = p.data_root or (cfg.geotiff.data_root if cfg.geotiff else None)
        if not root:
            raise PipelineError("--source geotiff needs --data-root <dir> (or geotiff.data_root in the config)")
        attrs = ingest_geotiffs(
            cfg,
            Path(root),
            Path(p.output),
            overwrite=p.overwrite,
            restart=p.restart,
            progress=True,
            num_workers=p.workers,
        )
    else:
        from rtscore.data.synthetic.producer import generate_synthetic

        attrs = generate_synthetic(
            cfg,
            Path(p.output),
            overwrite=p.overwrite,
            restart=p.restart,
            progress=True,
            num_workers=p.workers,
        )
    counts = attrs.counts
    print(f"wrote {p.output}: {counts.partition()}, prevalence {attrs.prevalence.exact:.5f}")
    return 0


def synth_geotiff(p: SynthGeotiffParams) -> int:
    from rtscore.config import GenerationConfig, load_config, load_pipeline_config
    from rtscore.config.base import read_yaml
    from rtscore.data.geotiff.synth import write_synthetic_geotiffs

    doc = read_yaml(p.config)
    if isinstance(doc, dict) and "split" in doc:  # one split's generation config
        cfgs = [load_config(GenerationConfig, p.config)]
    else:  # a pipeline config: every split it generates, in one data root
        cfgs = [g for _, g in load_pipeline_config(p.config).data.generation.items()]
    summary = write_synthetic_geotiffs(cfgs, Path(p.output), overwrite=p.overwrite)
    print(
        f"wrote {summary.output}: {summary.n_tiles} tiles of splits {','.join(summary.splits)} "
        f"({summary.n_positive} positive, {summary.n_full_nodata} full NoData) as GeoTIFFs"
    )
    return 0


def tile(p: TileParams) -> int:
    from rtscore.config.tiling import load_tiling_config
    from rtscore.data.tiling.run import tile_scenes

    cfg = load_tiling_config(p.config)  # absolute (Cli parse): the resume fingerprint holds its paths
    output = p.output or cfg.output
    if not output:
        raise PipelineError(f"{p.config}: no output; give --output <dir> (or output: in the config)")
    m = tile_scenes(cfg, Path(output), overwrite=p.overwrite)
    c = m.counts
    print(
        f"wrote {output}: {c.tiles} tiles ({c.positive} positive, {c.negative} negative; {m.resumed_tiles} kept from "
        f"an earlier run) in regions {m.regions}; {c.skipped_no_valid_pixels} cells without valid pixels skipped"
        + (
            f", {c.skipped_sparse} sparse (under {cfg.min_valid_fraction:.0%} valid, min_valid_fraction) skipped"
            if c.skipped_sparse
            else ""
        )
        + (f", {c.skipped_outside_regions} outside the regions" if c.skipped_outside_regions else "")
    )
    print(f"polygons: {c.labels_line()}")
    if c.polygons_outside_scenes:
        print(f"warning: {c.polygons_outside_scenes} polygon(s) touch no scene and were not tiled")
    return 0


def warp(p: WarpParams) -> int:
    from rtscore.config.tiling import load_tiling_config
    from rtscore.data.raster.warp import warp_scenes

    cfg = load_tiling_config(p.config)
    trained = None
    if p.package is not None:
        from rtscore.package.verify import trained_on

        trained = trained_on(p.package)
    s = warp_scenes(cfg, Path(p.output), scenes=p.scenes, package=trained)  # logs each scene as it is done
    print(
        f"wrote {s.output}: {s.written} scene(s) warped, {s.kept} kept from an earlier run"
        + (f", {s.empty} without valid pixels" if s.empty else "")
    )
    return 0


def stats(p: StatsParams) -> int:
    from rtscore.data.normalization.compute import compute_normalization_stats
    from rtscore.data.normalization.stats import write_normalization_stats

    extra = None
    clip = p.clip
    if p.config:
        from rtscore.config import load_pipeline_config

        cfg = load_pipeline_config(p.config)
        extra = cfg.channels.extra  # names and EXTRA bands: the store must have been written with this binding
        clip = clip or cfg.normalization.clip_percentiles
    out = Path(p.output) if p.output else Path(p.dataset).parent / RunLayout.NORMALIZATION_STATS.at()
    check_writable(out)  # before the pass over the store, not after it
    stats = compute_normalization_stats(p.dataset, extra_channels=extra, clip_percentiles=clip, progress=True)
    write_normalization_stats(stats, out)
    print(json.dumps(stats.to_json(), indent=2))
    print(f"wrote {out}")
    return 0


def _validation_stats(given: str | None, root: Path) -> Path:
    """The stats file ``rts validate`` reads: ``--stats`` when given (which must exist: it is never replaced by
    another file), else normalization_stats.json next to the datasets or in their parent (the run directory)."""
    if given:
        stats = Path(given)
        if not stats.is_file():
            raise StorageError(f"--stats {given}: no such file; give an existing stats file or leave --stats out")
        return stats
    stats_name = RunLayout.NORMALIZATION_STATS.at()
    stats = root / stats_name
    if not stats.exists() and (root.parent / stats_name).exists():
        stats = root.parent / stats_name
    if not stats.exists():
        raise StorageError(f"normalization stats not found at {stats}; run `rts stats --dataset <train.zarr>` first")
    return stats


def validate(p: ValidateParams) -> int:
    from rtscore.config import load_pipeline_config
    from rtscore.data.validation.run import validate_data

    cfg = load_pipeline_config(p.config)
    root = Path(p.dataset)
    stores: dict[str, Path] = {s: root / _store_name(s) for s in SPLITS if (root / _store_name(s)).exists()}
    if not stores and (root / "zarr.json").exists():  # a single store
        from rtscore.data.store.format import read_store_attrs

        stores = {read_store_attrs(root).split: root}
        root = root.parent
    stats = _validation_stats(p.stats, root)
    out = Path(p.output) if p.output else root / RunLayout.VALIDATION.at()
    check_writable(out)
    report = validate_data(cfg, stores, stats, out, max_batches=p.max_batches, num_workers=p.workers, progress=True)
    for split, s in report.splits.items():
        print(f"{split}: {s.n_usable} usable tiles, {s.n_positive} positive, prevalence {s.prevalence:.5f}")
    for w in report.warnings:
        print(f"warning: {w}")
    print(f"validation passed; report in {out}")
    return 0


def _store_name(split: str) -> str:
    """A split's store name in a datasets directory (as a run lays it out)."""
    return Path(RunLayout.DATASET.at(split=split)).name


def import_npz(p: ImportNpzParams) -> int:
    from rtscore.data.store.legacy_npz import import_npz

    attrs = import_npz(
        p.input, p.output, split=p.split, shard_tiles=p.shard_tiles, overwrite=p.overwrite, progress=True
    )
    print(f"wrote {p.output}: {attrs.counts.n_tiles} tiles")
    return 0


def noise_floor(p: NoiseFloorParams) -> int:
    from rtscore.config import load_pipeline_config
    from rtscore.train.noise_floor import measure_noise_floor, render_noise_floor

    cfg = load_pipeline_config(p.config)
    seed = cfg.training.seed if p.seed is None else p.seed
    report = measure_noise_floor(cfg, p.run_dir, seed, repeats=p.repeats, draws_per_run=p.draws)
    print(render_noise_floor(report))
    return 0


def profile_batch(p: ProfileBatchParams) -> int:
    from rtscore.config import load_pipeline_config
    from rtscore.storage import atomic_write_text
    from rtscore.train.profile import profile_batch_sizes, render_profile

    cfg = load_pipeline_config(p.config)
    report = profile_batch_sizes(
        cfg, devices=p.devices, memory_cap_gib=p.max_memory_gb, max_batch=p.max_batch, steps=p.steps
    )
    md = render_profile(report)
    print(md)
    if p.output:
        atomic_write_text(Path(p.output), md)
        print(f"wrote {p.output}")
    return 0


def gpu_check_options(p: GpuCheckParams) -> GpuCheckOptions:
    """The library's options of the check, each field of :class:`GpuCheckOptions` taken from the option of the same
    name: one the command lacks fails here (AttributeError) instead of silently keeping the library's default."""
    from rtscore.diagnostics.gpu_check import GpuCheckOptions

    return GpuCheckOptions(**{f.name: getattr(p, f.name) for f in dataclasses.fields(GpuCheckOptions)})


def gpu_check(p: GpuCheckParams) -> int:
    """`rts gpu-check`: generate, profile, train and validate briefly; each step's figures and a JSON report."""
    from rtscore.config import load_pipeline_config
    from rtscore.diagnostics.gpu_check import render_gpu_check, run_gpu_check

    cfg = load_pipeline_config(p.config, p.overrides or None)
    report = Path(p.report) if p.report else Path(p.work_dir) / "gpu_check.json"
    check_writable(report)
    opts = gpu_check_options(p)
    result = run_gpu_check(cfg, p.work_dir, report, opts)
    print(render_gpu_check(result))
    return 0


def package_verify(p: VerifyParams) -> int:
    """`rts package verify DIR`: audit a deployment package, load it and run one tile; 0 when every check passes."""
    from rtscore.package import render_verify_report, verify_package

    report = verify_package(
        Path(p.dir),
        device=p.device,
        allow_fallback_threshold=p.allow_fallback_threshold,
    )
    print(render_verify_report(report))
    return 0 if report.ok else 1


def predict(p: PredictParams) -> int:
    """`rts predict`: probabilities + mask COGs of a raster or a directory of rasters with a deployment package.

    Arguments: ``package`` (package dir), ``input`` (a .tif or a directory of .tif; ``*_extra.tif`` are EXTRA
    siblings), ``output`` (directory), ``stride`` (int or None: half a tile), ``device`` (default auto: the GPU
    when there is one, as calibration ran),
    ``extra`` (optional EXTRA raster for a single input; default ``<stem>_extra.tif`` next to each input),
    ``rgb_bands`` (a RasterBandMap replacing the package's band map, or None). Every input is checked against the
    package's raster contract before the first is predicted.
    """
    from rtscore.inference.predict import check_inputs, input_rasters, load_package, predict_raster
    from rtscore.package.format import refuse_output_in_package

    refuse_output_in_package(p.output, p.package, what="--output")  # maps written there break the package
    files = input_rasters(p.input)
    extra = p.extra
    bands = p.rgb_bands
    if extra and len(files) > 1:
        raise PipelineError("--extra needs a single --input raster (directories use <stem>_extra.tif)")
    pkg = load_package(p.package, device=p.device)
    check_inputs(pkg, files, extra_tif=extra, rgb_bands=bands)  # every file, before any output is written
    for f in files:
        stride = p.stride
        out = predict_raster(pkg, f, p.output, stride=stride, extra_tif=extra, rgb_bands=bands, check_finite=False)
        skipped = f" ({out.skipped_windows} full-NoData skipped)" if out.skipped_windows else ""
        print(
            f"{f.name}: {out.windows} windows{skipped}, {out.positive_pixels:,} of {out.valid_pixels:,} valid "
            f"pixels >= threshold -> {out.prob.name}, {out.mask.name}, {out.manifest.name}"
        )
    return 0


def drift(p: DriftParams) -> int:
    """`rts drift`: input drift of new imagery against the package's normalization stats; 1 on a blocker.

    Arguments: ``package`` (package dir), ``input`` (a .tif or a directory of .tif), ``output`` (report dir),
    ``rgb_bands`` (a RasterBandMap replacing the package's band map, or None).
    """
    from rtscore.inference.drift import REPORT_MD, drift_report, render_markdown
    from rtscore.package.format import refuse_output_in_package

    refuse_output_in_package(p.output, p.package, what="--output")  # a report written there breaks the package
    report = drift_report(p.package, p.input, p.output, rgb_bands=p.rgb_bands)
    print(render_markdown(report, console=True), end="")  # the per-region and per-raster lists: in the report
    print(f"wrote {Path(p.output) / REPORT_MD}")
    return 0 if report.ok else 1


def map_region(p: MapParams) -> int:
    """`rts map`: a mapping campaign in process (rtscore.mapping.campaign); 1 when scenes failed (re-run retries)."""
    from rtscore.mapping.campaign import SUMMARY_MD, CampaignRoot, run_campaign

    s = run_campaign(p.package, p.input, p.output, p.chunk_size, allow_drift=p.allow_drift, device=p.device)
    print(f"{s.done} done, {s.skipped_full_nodata} skipped (full NoData), {s.failed} failed of {s.scenes}")
    print(f"wrote {CampaignRoot(p.output).uri_of(SUMMARY_MD)}; log {s.log}")
    return 1 if s.failed else 0


def review_export(p: ReviewExportParams) -> int:
    """`rts review export`: chips, manifest, review page and Label Studio tasks of a campaign's objects."""
    from rtscore.mapping.outputs import CampaignRoot
    from rtscore.review.manifest import PAGE_FILE, ChipSettings, Selection
    from rtscore.review.run import export

    selection = Selection(mode=p.select, min_prob=p.min_prob, n=p.n, seed=p.seed)
    chips = ChipSettings(context=p.context, min_px=p.min_chip_px, max_px=p.max_chip_px)
    h = export(
        p.campaign,
        p.package,
        p.output,
        selection,
        chips,
        tiling_config=p.tiling_config,
        image_root=p.label_studio_image_root,
        overwrite=p.overwrite,
    )
    print(
        f"{h.n_objects} objects to review (review {h.review_id[:12]}); open {CampaignRoot(p.output).uri_of(PAGE_FILE)}"
    )
    return 0


def review_ingest(p: ReviewIngestParams) -> int:
    """`rts review ingest`: verdicts into the next dataset version (a data root cut by rts tile)."""
    from rtscore.review.ingest import ingest_review

    r = ingest_review(
        p.review,
        p.verdicts,
        p.tiling_config,
        p.output,
        held_out=p.held_out,
        new_regions=p.new_regions,
        campaign=p.campaign,
        version=p.version,
        pipeline_config=p.pipeline_config,
        min_distance_m=p.min_distance_m,
    )
    print(r.summary_line())
    return 0


def review_serve(p: ReviewServeParams) -> int:
    """`rts review serve`: the review page over http until Ctrl-C (SIGINT) or SIGTERM, however it was started."""
    from rtscore.review.serve import serve_until_stopped

    def announce(url: str) -> None:
        print(f"serving {p.review} at {url} (Ctrl-C stops)", flush=True)

    serve_until_stopped(Path(p.review), p.host, p.port, on_ready=announce)
    return 0


def arts_check(p: ArtsCheckParams) -> int:
    """`rts arts check`: every problem of an ARTS file, one line each; 2 when there is any."""
    from rtscore.data.inventory.check import check_arts

    result = check_arts(p.file)
    for problem in result.problems:
        print(problem.line())
    print(result.summary())
    return 0 if result.ok else 2


def arts_export(p: ArtsExportParams) -> int:
    """`rts arts export`: a campaign's objects (and a review's verdicts) as an ARTS contribution."""
    import datetime as dt

    from rtscore.review.arts_export import ContributionSettings, export_arts

    settings = ContributionSettings(
        creator=p.creator,
        source=p.source,
        region=p.region,
        base_map_date=p.base_map_date,
        resolution=p.resolution,
        contribution_date=dt.date.fromisoformat(p.contribution_date) if p.contribution_date else dt.date.today(),
        include_unreviewed=p.include_unreviewed,
    )
    r = export_arts(
        p.campaign, p.output, settings, verdicts=p.verdicts, review=p.review, prior=p.prior, scene_list=p.scene_list
    )
    print(r.summary_line())
    return 0
