"""The sweep flow's parameters: the variants of a sweep file judged against the baseline within seed noise, and the
command line's own view of them."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import Field

from flows.fields import Cli, local_file, run_location
from flows.form import FormModel, OptionalSwitch
from flows.params import DistributedParams, derived


def default_sweep_dir(data: dict[str, Any]) -> str:
    """``artifacts/sweeps/<sweep file name>``: the sweep directory when none is given."""
    return str(Path("artifacts") / "sweeps" / Path(str(data.get("sweep", "sweep"))).stem)


class SweepParams(FormModel):
    """sweep: every variant of a sweep file trained over the same seeds, judged against the baseline within seed
    noise (docs/experiments.md); the chosen variant then runs the after-training stages."""

    sweep: Annotated[str, Cli(positional=True, parse=local_file)] = Field(
        ...,
        description="Sweep file YAML on the worker (e.g. configs/sweeps/quickstart.yaml): a base config, variants "
        "as dotted-key overrides, seeds, the deciding metric.",
    )
    sweep_dir: Annotated[str, Cli(flag="--dir", parse=run_location)] = Field(
        default_factory=default_sweep_dir,
        description="Sweep directory: plan.json, report.md/json/png and variants/<name>/ (a run directory per "
        "variant): a local path or gs://bucket/prefix. Empty: artifacts/sweeps/<sweep file name>.",
    )
    execution: Literal["local", "distributed"] = Field(
        "local",
        description="local: every variant x seed trains inside this flow run, one after another. distributed: one "
        "train-seed flow run per variant x seed on the training deployment (a GPU pool), all at once.",
    )
    distributed: DistributedParams = Field(
        default_factory=DistributedParams,
        title="Distributed execution",
        description="Fan-out settings (used when execution is distributed).",
    )
    until_decided: bool = Field(
        False,
        description="Add seeds to every undecided variant (and the baseline) until each is decided or reaches "
        "until_decided.max_seeds of the sweep file.",
    )
    deterministic: OptionalSwitch = Field(
        None,
        description="Deterministic training on or off for every variant, over training.deterministic of the "
        "config; unset (config): as the config says.",
    )


class SweepCommandParams(SweepParams):
    """sweep: every variant of a sweep file trained over the same seeds, judged against the baseline within seed
    noise (docs/experiments.md); the chosen variant then runs the after-training stages. `rts sweep --status` prints
    the table of a sweep instead (the command line only: the sweep flow's form has no such field)."""

    status: bool = Field(
        False, description="Print the table of a running or finished sweep from its directory, and exit (no work)."
    )

    def flow_params(self) -> SweepParams:
        """The sweep flow's parameters: every field but ``status``."""
        return derived(SweepParams, self)
