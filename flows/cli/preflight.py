"""What a flow command checks before any work (`rts data`, `train`, `run`, `calibrate`, `evaluate-test`,
`package build`): its parameters, its config, and where it writes (a local run directory it may write; a gs://
run: credentials that load and a bucket they may list), each refusal one message (``rts`` exits 2).

Light on purpose (no Prefect, no torch): these checks answer in a second or two, before the flows and their
stages are imported and before Prefect's temporary server starts. The run's inputs are checked next, by
:func:`flows.common.check_inputs`, still before the server starts.
"""

from __future__ import annotations

import os

from flows.cli.options import ParameterError
from flows.params import PipelineParams, RunParams
from rtscore.config import PipelineConfig, load_pipeline_config
from rtscore.storage import check_writable
from rtscore.storage.gcs import check_access

__all__ = ["check_run"]


def check_run(params: RunParams) -> PipelineConfig:
    """The config of ``params`` (loaded and validated: a ConfigError names the file and keys), after checking
    the run location: a local one must be writable, a gs:// one reachable with the credentials at hand
    (:func:`rtscore.storage.gcs.check_access`); ``execution: distributed`` needs a Prefect server.

    Raises:
        PipelineError: the first problem found, as one message.
    """
    cfg = load_pipeline_config(params.config, params.overrides)
    if params.run_dir.startswith("gs://"):
        check_access(params.run_dir)
    else:
        check_writable(params.run_dir, directory=True)
    if isinstance(params, PipelineParams) and params.execution == "distributed" and not _api_url():
        raise ParameterError(
            "--execution distributed needs PREFECT_API_URL of a Prefect server with workers on the GPU pool "
            "(Prefect's temporary server has no workers)"
        )
    return cfg


def _api_url() -> str | None:
    """PREFECT_API_URL from the environment or the active Prefect profile."""
    if os.environ.get("PREFECT_API_URL"):
        return os.environ["PREFECT_API_URL"]
    from prefect.settings import PREFECT_API_URL  # heavy: only for a distributed run without the variable

    value = PREFECT_API_URL.value()
    return str(value) if value else None
