"""How a parameter field appears on the command line, declared with the field: ``Annotated[T, Cli(...)]`` in a
flow's or command's parameter model (:mod:`flows.params`, :mod:`flows.cli.command_params`), and the checks its value
gets at parse time. The models and the flows read this module; the CLI machinery (:mod:`flows.cli.options`) turns
the metadata into argparse options. Flows never import :mod:`flows.cli`.
"""

from __future__ import annotations

import argparse
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pydantic.fields import FieldInfo

from rtscore.storage import StorageError, check_writable

GS_SUPPORT = (
    "gs:// is taken by --run of rts data, train, run, calibrate, evaluate-test and package build, and by "
    "--data-root of rts generate --source geotiff, and by --input and --output of rts map"
)


@dataclass(frozen=True)
class Cli:
    """How a field appears on the command line: ``Annotated[T, Cli(...)]`` in a parameter model.

    ``flag``: the option's name when it is not ``--<field name>`` (e.g. ``--run`` for ``run_dir``);
    ``positional``: an argument without a flag; ``parse``: the argparse type, a check at parse time whose
    ``argparse.ArgumentTypeError`` names the option (e.g. a local path that must be writable); ``metavar``:
    the value's name in the help.
    """

    flag: str | None = None
    positional: bool = False
    parse: Callable[[str], Any] | None = None
    metavar: str | None = None


def cli_of(field: FieldInfo) -> Cli:
    """A field's command-line metadata (the defaults where it declares none)."""
    return next((m for m in field.metadata if isinstance(m, Cli)), Cli())


def flag_of(path: tuple[str, ...], field: FieldInfo) -> str:
    """The option that sets the field at ``path`` (its names down nested models): the flag its :class:`Cli` names,
    else ``--<path joined by dots, _ as ->``; a positional argument's name."""
    cli = cli_of(field)
    if cli.flag:
        return cli.flag
    return path[-1] if cli.positional else "--" + ".".join(path).replace("_", "-")


# ------------------------------------------------------------------------------ checks at parse time (argparse types)
def local_path(value: str) -> str:
    """A local path: a URI is refused, saying where gs:// is taken (instead of becoming the local path
    'gs:/bucket/...')."""
    if "://" in value:
        raise argparse.ArgumentTypeError(
            f"{value} is a URI, this option takes a local path ({GS_SUPPORT}); copy it here first, "
            f"e.g. gcloud storage cp -r {value} ."
        )
    return value


def local_file(value: str) -> str:
    """A local input file, made absolute (a flow run resolves it from its own working directory)."""
    return str(Path(local_path(value)).resolve())


def local_output(value: str) -> str:
    """A local output location, refused at once when it cannot be written."""
    local_path(value)
    try:
        check_writable(value)
    except StorageError as err:
        raise argparse.ArgumentTypeError(str(err)) from None
    return value


def local_run_dir(value: str) -> str:
    """A local run directory to read (a URI and an existing file are refused, naming the path)."""
    local_path(value)
    if Path(value).is_file():
        raise argparse.ArgumentTypeError(f"{value} is a file, not a run directory")
    return value


def run_location(value: str) -> str:
    """A gs:// URI, or a local directory that can be written (an existing file there is refused)."""
    if value.startswith("gs://"):
        return value
    local_path(value)
    try:
        check_writable(value, directory=True)
    except StorageError as err:
        raise argparse.ArgumentTypeError(str(err)) from None
    return value


def data_root_location(value: str) -> str:
    """A gs:// prefix or a local directory."""
    return value if value.startswith("gs://") else local_path(value)
