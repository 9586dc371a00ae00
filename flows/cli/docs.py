"""docs/commands.md, generated from the commands' parameter models: `python -m flows.cli.docs` (or `make docs`)
rewrites it; tests/test_cli_docs.py fails when the file is stale.

The options tables come from the models (flows/cli/options.py, the same derivation as the parser); the prose here
says what the tables cannot (what a command writes, how it resumes) and the examples are parsed by the tests.
"""

from __future__ import annotations

import sys
from pathlib import Path

from flows.cli.main import COMMANDS, Command
from flows.cli.options import Option, _kind, _without_none, options
from rtscore.report import md_table

PROJECT = Path(__file__).resolve().parents[2]
DOC = PROJECT / "docs" / "commands.md"
Q = "configs/quickstart.yaml"
RUN = f"--config {Q} --run artifacts/my-run"
PKG = "--package artifacts/quickstart/package"

EXAMPLES: dict[str, tuple[str, ...]] = {
    "run": (
        f"rts run --config {Q}",
        f"rts run {RUN} --skip-generation",
        "rts run --config configs/quickstart_geotiff.yaml",
    ),
    "sweep": (
        "rts sweep configs/sweeps/quickstart.yaml",
        "rts sweep configs/sweeps/quickstart.yaml --status",
        "rts sweep configs/sweeps/boundary_handling.yaml --execution distributed --until-decided",
    ),
    "tile": ("rts tile --config configs/tiling/example.yaml --output data/my-tiles",),
    "warp": (
        "rts warp --config configs/tiling/example.yaml --scenes new_scenes/*.tif --output scenes/",
        f"rts warp --config configs/tiling/example.yaml --scenes new_scenes/*.tif --output scenes/ {PKG}",
    ),
    "generate": (
        "rts generate --source synthetic --config configs/generation/quickstart_train.yaml "
        "--output datasets/train.zarr",
        "rts generate --source geotiff --data-root data/quickstart-tiles "
        "--config configs/generation/quickstart_val.yaml --output datasets/val.zarr",
    ),
    "synth-geotiff": (f"rts synth-geotiff --config {Q} --output data/quickstart-tiles",),
    "stats": (f"rts stats --dataset datasets/train.zarr --config {Q}",),
    "validate": (f"rts validate --dataset datasets --config {Q}",),
    "import-npz": ("rts import-npz --input old_datasets/train_4000 --output datasets/train.zarr --split train",),
    "data": (f"rts data {RUN}",),
    "train": (f"rts train {RUN}", f"rts train {RUN} --seeds 42 43 44", f"rts train {RUN} --seed 7 --fresh"),
    "noise-floor": (f"rts noise-floor {RUN}",),
    "profile-batch": (
        "rts profile-batch --config configs/baseline.yaml",
        "rts profile-batch --config configs/baseline.yaml --devices 8",
    ),
    "gpu-check": (
        "rts gpu-check --config configs/baseline.yaml --dir artifacts/gpu-check",
        f"rts gpu-check --config {Q} --train-tiles 64 --val-tiles 32 --max-batch 8 --epochs 2 --steps-per-epoch 2",
    ),
    "calibrate": (f"rts calibrate {RUN}",),
    "evaluate-test": (f"rts evaluate-test {RUN}",),
    "package build": (f"rts package build {RUN}",),
    "package verify": ("rts package verify artifacts/my-run/package",),
    "predict": (
        f"rts predict {PKG} --input scene.tif --output maps/",
        f"rts predict {PKG} --input planet/ --output maps/ --rgb-bands 2,1,0",
    ),
    "drift": (f"rts drift {PKG} --input new_tiles/ --output drift/",),
    "map": (
        f"rts map {PKG} --input scenes/ --output campaign/",
        f"rts map {PKG} --input gs://bucket/scenes --output gs://bucket/campaign --chunk-size 20",
    ),
    "review export": (
        f"rts review export --campaign campaign/ {PKG} --output review/",
        f"rts review export --campaign campaign/ {PKG} --output review/ --select stratified --n 300 "
        "--tiling-config tile.yaml",
        f"rts review export --campaign gs://bucket/campaign {PKG} --output gs://bucket/review --select uncertain "
        "--n 200",
    ),
    "review ingest": (
        "rts review ingest --review review/ --verdicts verdicts.geojson --tiling-config tile.yaml --output tiles-r2 "
        "--held-out skip",
        "rts review ingest --review review/ --verdicts label-studio-export.json --tiling-config tile.yaml "
        "--output tiles-r2 --held-out skip --pipeline-config pipeline.yaml",
    ),
    "review serve": ("rts review serve review/", "rts review serve review/ --port 0"),
    "arts check": ("rts arts check contribution.geojson", "rts arts check ARTS_main_dataset.shp"),
    "arts export": (
        "rts arts export --campaign campaign/ --output contribution.geojson --creator 'Permafrost Lab' "
        "--source PlanetScope --review review/ --verdicts verdicts.geojson",
        "rts arts export --campaign campaign/ --output contribution.geojson --creator 'Permafrost Lab' "
        "--source PlanetScope --region 'Banks Island' --include-unreviewed --scene-list scenes.csv "
        "--prior ARTS_main_dataset.geojson --contribution-date 2026-03-01",
    ),
}

INTRO = """\
Every command of the project is a subcommand of `rts` (`.venv/bin/rts` after `make install`); `rts --help` and
`rts <command> --help` list the options. Each command has one parameter model, the single source of its options,
their help, their checks and this page: the pipeline commands take the flows' own models (`flows/params/`,
the same fields as the Prefect UI's form of that flow), the library commands theirs (`flows/cli/command_params.py`).
An option not given leaves the field to the model's default; a value the model refuses is one line naming the
option (exit 2) before any work.

Library commands (`tile`, `warp`, `generate`, `synth-geotiff`, `stats`, `validate`, `import-npz`, `noise-floor`,
`profile-batch`, `gpu-check`, `predict`, `drift`, `map`, `package verify`, `arts check`, `arts export`) call
`rtscore` directly. Pipeline
commands (`data`, `train`, `run`, `calibrate`, `evaluate-test`, `package build`) run the Prefect flows: against a
temporary local API started inside the process, or against a server when `PREFECT_API_URL` is set. Each of them
takes `--deterministic` / `--no-deterministic`, part of every stage's cache key: give the same value when
re-running one stage of a run.

Exit status: 0 on success; 2 with a one-line message for an error you can act on (a bad config, a missing stage
output, refused numerics); 130 on Ctrl-C (re-run the same command to resume); `rts package verify` returns 1
when a check fails, `rts drift` 1 on a deployment blocker, `rts map` 1 when scenes failed and `rts arts check` 2
when the file breaks a rule of the ARTS format. Anything else is a bug and prints its traceback.
"""

NOTES: dict[str, str] = {
    "sweep": "Writes `plan.json`, `noise_floor.json`, `report.json`/`.md`/`.png` and `variants/<name>/` (a run "
    "directory per variant) under `--dir`. Every variant and the deciding metric are checked before any work; the "
    "stage runs variants share are computed once and adopted; the choice is recorded before the chosen variant's "
    "test evaluation. A re-run trains nothing twice. See [experiments.md](experiments.md).",
    "run": "Every stage is cached on its code, the config sections it reads and the identity of every input it "
    "reads, so re-running the same command recomputes only what changed ([faults.md](faults.md)). "
    "`--execution distributed` needs `PREFECT_API_URL` of a server with workers ([cloud.md](cloud.md)).",
    "tile": "Every input is checked before a tile is written; re-running resumes, and an output tiled by other "
    "code, settings or inputs is set aside (`.rts-tile/set_aside/`) and tiled afresh. Rules: "
    "[geotiff.md](geotiff.md#from-scenes-and-polygons-rts-tile).",
    "warp": "Each scene's cells are rendered by the code of `rts tile`, one at a time, into COGs written under "
    "temporary names and renamed; `<stem>_warp.json`, written last, lets a re-run skip the scene. Rules: "
    "[geotiff.md](geotiff.md#scenes-for-mapping-rts-warp).",
    "generate": "GeoTIFF ingestion: [geotiff.md](geotiff.md). Multi-scale training data (guide §8.3): a generation "
    "config with `scale: 0.5` (`configs/generation/quickstart_train_half.yaml`), listed in "
    "`data.additional_roots`.",
    "validate": "Every tile of every split goes through its split's plain loader; then the training loader is "
    "checked as training builds it (balanced curriculum sampler, `training.seed`): every planned batch of the "
    "first epoch of each curriculum stage must hold a positive tile. The report is `report.json`, `report.md` "
    "and `samples.png`.",
    "train": "Each seed writes `seeds/seed_<n>/` in the run directory: `best_deployment.pth`, `resume_latest.pth` "
    "and the last rotating checkpoints, `metrics.jsonl`, `curves.png`, `run_summary.json/.md`. Re-running the same "
    "command resumes exactly; a checkpoint written by other code or inputs is set aside "
    "([faults.md](faults.md)).",
    "profile-batch": "Each trial holds and runs what training does: the model, its gradients, AdamW, the EMA copy "
    "and its update, the configured loss, clipping, `torch.compile` when on, and a validation forward pass with "
    "the EMA swapped in. The batch searched is the batch per device, `training.batch_size` (guide §9.1: per "
    "GPU); with `--devices N` the report gives each batch's effective batch (N x it, one optimizer step) and adds "
    "DDP's gradient buckets per device, an estimate from the parameter count.",
    "gpu-check": "Five steps, each printed with its figures as it ends: generate the train and the val store, "
    "their normalization stats, `rts profile-batch`'s profile, a short training of `training.seed` (the backbone "
    "unfrozen from epoch 2, a validation pass every epoch) at the configured batch, or at the recommended one "
    "when it does not fit. The JSON report is rewritten after every step; `ok` is false and `error` says why "
    "when a step fails. How to read it: [cloud.md](cloud.md#checking-a-gpu-machine).",
    "calibrate": "Without `--seeds` it takes every seed trained in the run; it writes "
    "`calibration/deployment_config.yaml` ([after-training.md](after-training.md)).",
    "evaluate-test": "Without `--seeds`: the seeds of the last calibration; writes `evaluation/test_report.md`.",
    "package build": "Without `--seeds`: the seeds of the last calibration; writes `<run>/package/`.",
    "predict": "Memory is bounded by the raster's width, not its area ([geotiff.md](geotiff.md)).",
    "map": "The campaign: [mapping.md](mapping.md); the `map-region` flow runs the same, also distributed.",
    "review export": "Writes `review.json`, `manifest.jsonl`, `chips/`, `index.html` (the review page) and "
    "`label-studio/` under `--output`; a re-run resumes. The review loop: [review.md](review.md); the `review-export` "
    "flow runs the same.",
    "review ingest": "Checks every verdict, object, campaign and region before anything is written, then cuts the "
    "next data root with `rts tile` and records its lineage; prints the next round's `rts run` with a `--run` of its "
    "own, or says that the round adds nothing (its tiles the parent's) ([review.md](review.md)).",
    "arts check": "The rules and what each line means: [arts.md](arts.md#arts-check).",
    "arts export": "Where each field comes from, the area and centroid rules and the relationships file: "
    "[arts.md](arts.md#arts-export).",
}


def _value(opt: Option) -> str:
    """What the option takes, and its default."""
    field = opt.field
    base, optional = _without_none(field.annotation)
    if base is bool and opt.cli.parse is None:
        switch = field.default is not False or optional
        return f"`{opt.flag}` / `--no-{opt.flag[2:]}`" if switch else "switch"
    if opt.cli.metavar:
        text = f"`{opt.cli.metavar}`"
    else:
        kind = _kind(field.annotation)
        text = "\\|".join(f"`{c}`" for c in kind["choices"]) if "choices" in kind else kind["type"].__name__
        text = {"_json_object": "JSON object"}.get(text, text)
        if kind.get("nargs") == "+":
            text += " ..."
    if field.is_required():
        return text + ", required"
    default = field.default
    if field.default_factory is None and default not in (None, False) and not isinstance(default, dict):
        shown = " ".join(map(str, default)) if isinstance(default, list | tuple) else str(default)
        text += f", default `{shown}`"
    return text


def _cell(text: str) -> str:
    """A description as one table cell: whitespace folded, ``|`` escaped, ``<`` kept from reading as HTML."""
    return " ".join(text.split()).replace("|", "\\|").replace("<", "&lt;")


def _section(c: Command) -> str:
    title = f"## `rts {c.name}`" + (" (alias " + ", ".join(f"`rts {a}`" for a in c.aliases) + ")" if c.aliases else "")
    doc = " ".join((c.params.__doc__ or "").split())
    rows = [[f"`{o.flag}`", _value(o), _cell(o.field.description or "")] for o in options(c.params)]
    model = c.params.__name__
    module = sys.modules[c.params.__module__]  # the model's own module (a package's is its __init__.py)
    where = Path(str(module.__file__)).resolve().relative_to(PROJECT).as_posix()
    parts = [title, "", f"{c.help[0].upper()}{c.help[1:]}.", "", f"Parameters: [`{model}`](../{where}). {doc}"]
    if c.name in NOTES:
        parts += ["", NOTES[c.name]]
    parts += ["", *md_table(["option", "value", "meaning"], rows)]
    parts += ["", "```bash", *EXAMPLES[c.name], "```", ""]
    return "\n".join(parts)


def render() -> str:
    """docs/commands.md."""
    glance = [e for c in COMMANDS for e in EXAMPLES[c.name][:1]]
    head = [
        "# The `rts` command",
        "",
        "<!-- Generated by `python -m flows.cli.docs` from the commands' parameter models; edit those. -->",
        "",
        INTRO,
        "## At a glance",
        "",
        "```bash",
        *glance,
        "```",
        "",
        "",
    ]
    return "\n".join(head) + "\n".join(_section(c) for c in COMMANDS)


def main() -> int:
    DOC.write_text(render())
    print(f"wrote {DOC}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
