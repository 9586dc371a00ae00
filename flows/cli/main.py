"""The `rts` command: every command of the project, each from one parameter model.

Each command is a row of :data:`COMMANDS`: its name, its parameter model (flows/params/ for the pipeline
commands, the same models the flows and the Prefect UI take; flows/cli/command_params.py for the library commands),
the function that runs it and documented examples. The options, their help, their checks and docs/commands.md
are derived from the model (flows/cli/options.py, flows/cli/docs.py), so none of them is a hand copy.

An error a user can act on (`rtscore.errors.PipelineError`) prints as one line and exits 2; anything else is a
bug and shows its traceback. Heavy imports happen inside the commands, so `rts --help` answers at once.
"""

from __future__ import annotations

import argparse
import logging
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from flows.cli import commands as lib
from flows.cli import flow_commands as flows
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
from flows.cli.options import add_options, params_from
from flows.form import FormModel
from flows.params import DataParams, PipelineParams, SeedStageParams, TileParams, TrainParams
from flows.params.mapping import MapParams
from flows.params.review import ReviewExportParams, ReviewIngestParams
from flows.params.sweep import SweepCommandParams
from rtscore.errors import PipelineError


@dataclass(frozen=True)
class Command:
    """One `rts` command: ``name`` (a space for a subcommand, e.g. "package build"), its parameter model, the
    function running it (returns the exit status), a one-line help, examples (each parsed by the tests)."""

    name: str
    params: type[FormModel]
    run: Callable[[Any], int]
    help: str
    aliases: tuple[str, ...] = ()


COMMANDS: tuple[Command, ...] = (
    Command(
        "run",
        PipelineParams,
        flows.pipeline,
        "the full pipeline: data -> training -> calibrate -> evaluate-test -> package",
        aliases=("pipeline",),
    ),
    Command(
        "sweep",
        SweepCommandParams,
        flows.sweep,
        "variants of a config trained over the same seeds, each judged against the baseline within seed noise",
    ),
    Command("tile", TileParams, lib.tile, "cut scenes and an RTS polygon inventory into the tile layout"),
    Command(
        "warp", WarpParams, lib.warp, "put scenes on a tiling config's grid, with its EXTRA bands, for predict and map"
    ),
    Command(
        "generate", GenerateStoreParams, lib.generate, "generate a tile store (one split) from a generation config"
    ),
    Command(
        "synth-geotiff",
        SynthGeotiffParams,
        lib.synth_geotiff,
        "write the synthetic scenes of a generation config as GeoTIFFs",
    ),
    Command("stats", StatsParams, lib.stats, "normalization stats of a train store (train split only)"),
    Command("validate", ValidateParams, lib.validate, "check the datasets through the DataLoader and write a report"),
    Command(
        "import-npz", ImportNpzParams, lib.import_npz, "convert a legacy batched .npz dataset into a Zarr tile store"
    ),
    Command(
        "data", DataParams, flows.data, "run the data-pipeline flow (generate -> stats -> validate) into a run dir"
    ),
    Command("train", TrainParams, flows.train, "train one seed (train-seed flow) or several (multi-seed-train flow)"),
    Command(
        "noise-floor",
        NoiseFloorParams,
        lib.noise_floor,
        "guide §10.1 noise floor of a seed's best checkpoint: std of PR-AUC at 1:200 over repeated validations",
    ),
    Command(
        "profile-batch",
        ProfileBatchParams,
        lib.profile_batch,
        "largest training.batch_size (per device) that fits what training holds on this device",
    ),
    Command(
        "gpu-check",
        GpuCheckParams,
        lib.gpu_check,
        "check a GPU machine: generate a 4k + 1k store, profile the batch size, train and validate briefly, report",
    ),
    Command(
        "calibrate",
        SeedStageParams,
        flows.calibrate,
        "logit caches, TTA/scale gates, temperature and threshold (calibrate flow)",
    ),
    Command(
        "evaluate-test",
        SeedStageParams,
        flows.evaluate_test,
        "Test-Realistic with the frozen deployment config, mean ± std",
    ),
    Command(
        "package build",
        SeedStageParams,
        flows.package_build,
        "assemble <run>/package/ from the shipped seed (package flow)",
    ),
    Command(
        "package verify",
        VerifyParams,
        lib.package_verify,
        "audit a package without unpickling, then load it and run one tile",
    ),
    Command("predict", PredictParams, lib.predict, "probability and mask COGs of GeoTIFFs from a deployment package"),
    Command("drift", DriftParams, lib.drift, "compare new imagery with the package's normalization stats (guide §4.1)"),
    Command(
        "map", MapParams, lib.map_region, "map a region: a resumable campaign of rts predict over many scenes, objects"
    ),
    Command(
        "review export",
        ReviewExportParams,
        lib.review_export,
        "chips of a campaign's objects, a review page and Label Studio tasks, for people to judge",
    ),
    Command(
        "review ingest",
        ReviewIngestParams,
        lib.review_ingest,
        "verdicts -> the next dataset version: confirmed RTS in the inventory, false positives as hard negatives",
    ),
    Command("review serve", ReviewServeParams, lib.review_serve, "serve a review page over http on this machine"),
    Command(
        "arts check",
        ArtsCheckParams,
        lib.arts_check,
        "validate an ARTS file against the format's rules, every problem listed at once (exit 2 on any)",
    ),
    Command(
        "arts export",
        ArtsExportParams,
        lib.arts_export,
        "a campaign's objects and a review's verdicts as an ARTS contribution file (EPSG:3413, every field filled)",
    ),
)
BY_NAME = {c.name: c for c in COMMANDS}


def _description(model: type[FormModel]) -> str:
    return " ".join((model.__doc__ or "").split())


def parser() -> argparse.ArgumentParser:
    """Every `rts` command, its options derived from its parameter model."""
    p = argparse.ArgumentParser(prog="rts", description="RTS segmentation pipeline (rtscore + Prefect flows).")
    sub = p.add_subparsers(dest="command", required=True, metavar="COMMAND")
    groups: dict[str, argparse._SubParsersAction[argparse.ArgumentParser]] = {}
    for c in COMMANDS:
        group, _, name = c.name.rpartition(" ")
        parent = sub
        if group:
            if group not in groups:
                g = sub.add_parser(group, help=f"{group} {{{','.join(_subcommands(group))}}}")
                groups[group] = g.add_subparsers(dest=f"{group}_command", required=True, metavar="COMMAND")
            parent = groups[group]
        cp = parent.add_parser(name, help=c.help, description=_description(c.params), aliases=list(c.aliases))
        add_options(cp, c.params)
        cp.set_defaults(command_spec=c)
    return p


def _subcommands(group: str) -> list[str]:
    return [c.name.split(" ", 1)[1] for c in COMMANDS if c.name.startswith(group + " ")]


def parse(argv: Sequence[str] | None = None, p: argparse.ArgumentParser | None = None) -> tuple[Command, FormModel]:
    """The command and its validated parameters (an error naming the option: ParameterError)."""
    args = (p or parser()).parse_args(argv)
    command: Command = args.command_spec
    return command, params_from(command.params, args)


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
    command: Command = args.command_spec
    _log_to_stdout()
    try:
        return int(command.run(params_from(command.params, args)))
    except PipelineError as err:
        print(f"rts {command.name}: error: {error_message(err)}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print(f"rts {command.name}: interrupted; re-run the same command to resume", file=sys.stderr)
        return 130


def main(argv: Sequence[str] | None = None) -> int:
    return run(parser(), argv)


if __name__ == "__main__":
    sys.exit(main())
