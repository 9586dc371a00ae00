"""prefect.yaml stays in step with the code: every entrypoint is a flow, every stage is deployable alone,
pools, schedule and concurrency are set, and the deployments' parameters validate against the flows' models."""

from __future__ import annotations

import importlib
import json
import re
import runpy
import typing
from pathlib import Path
from typing import Any

import pytest
import yaml
from pydantic import BaseModel

ROOT = Path(__file__).resolve().parents[2]
DOC: dict[str, Any] = yaml.safe_load((ROOT / "prefect.yaml").read_text())
DEPLOYMENTS: dict[str, dict[str, Any]] = {d["name"]: d for d in DOC["deployments"]}


def _flow(entrypoint: str) -> Any:
    path, func = entrypoint.split(":")
    module = importlib.import_module(path.removesuffix(".py").replace("/", "."))
    return getattr(module, func)


def _params_model(flow: Any) -> type[BaseModel]:
    hints = typing.get_type_hints(flow.fn)
    assert list(hints) == ["params", "return"], f"{flow.name}: one typed `params` argument, got {list(hints)}"
    model = hints["params"]
    assert issubclass(model, BaseModel), flow.name
    return model


def test_every_file_prefect_yaml_names_exists() -> None:
    """Comments included: a renamed file must not leave a stale pointer behind."""
    text = (ROOT / "prefect.yaml").read_text()
    named = set(
        re.findall(r"(?<![\w/.-])((?:configs|deployments|flows|tasks|rtscore)/[\w./-]+\.(?:py|md|yaml|json))", text)
    )
    assert "deployments/gpu_job_template.py" in named
    assert sorted(p for p in named if not (ROOT / p).is_file()) == []


def test_every_deployment_entrypoint_is_a_prefect_flow() -> None:
    from prefect import Flow

    names = []
    for dep in DOC["deployments"]:
        flow = _flow(dep["entrypoint"])
        assert isinstance(flow, Flow), dep["entrypoint"]
        names.append(flow.name)
    # Every stage can be re-run alone (logit-cache also runs as calibrate's first step, in the calibrate flow).
    for stage in (
        "logit-cache",
        "generate-dataset",
        "normalization-stats",
        "validate-data",
        "train-seed",
        "multi-seed-train",
        "calibrate",
        "evaluate-test",
        "package",
    ):
        assert stage in names, f"stage {stage} has no deployment of its own"
    assert len(DEPLOYMENTS) == len(DOC["deployments"]), "deployment names are unique"


def test_flow_parameters_are_documented_models() -> None:
    """The UI builds its form from the models: every field has help text."""
    for dep in DOC["deployments"]:
        model = _params_model(_flow(dep["entrypoint"]))
        todo: list[type[BaseModel]] = [model]
        while todo:
            m = todo.pop()
            for name, field in m.model_fields.items():
                assert field.description, f"{m.__name__}.{name} has no description"
                ann = field.annotation
                if isinstance(ann, type) and issubclass(ann, BaseModel):
                    todo.append(ann)


@pytest.mark.parametrize("name", sorted(DEPLOYMENTS))
def test_deployment_parameters_validate_against_the_flow(name: str) -> None:
    from prefect.utilities.callables import parameter_schema
    from prefect.utilities.schema_tools import validate

    dep = DEPLOYMENTS[name]
    flow = _flow(dep["entrypoint"])
    parameters = dep.get("parameters") or {}
    assert set(parameters) <= {"params"}, f"{name}: unknown flow parameters {set(parameters) - {'params'}}"
    if "params" in parameters:
        model = _params_model(flow)
        # Deployment defaults must be complete (config, run_dir): a run from the UI starts with them as they are.
        model.model_validate(parameters["params"])
        # What the server checks on every run (enforce_parameter_schema).
        schema = parameter_schema(flow).model_dump_for_openapi()
        validate(json.loads(json.dumps(parameters)), schema, raise_on_error=True, ignore_required=False)


def test_pools_job_variables_schedule_and_concurrency() -> None:
    pool = {n: d["work_pool"]["name"] for n, d in DEPLOYMENTS.items()}
    assert pool["rts-pipeline"] == "cpu-process" and pool["rts-final-multiseed"] == "cpu-process"
    for n in ("data-pipeline", "generate-dataset", "normalization-stats", "validate-data", "package"):
        assert pool[f"stage-{n}"] == "cpu-process", n
    for n in (
        "stage-train-seed",
        "stage-multi-seed-train",
        "stage-logit-cache",
        "stage-calibrate",
        "stage-evaluate-test",
    ):
        assert pool[n] == "gpu", n
        jv = DEPLOYMENTS[n]["work_pool"]["job_variables"]
        assert jv["accelerator_type"] and int(jv["accelerator_count"]) >= 1, f"{n}: GPU type and count"

    final = DEPLOYMENTS["rts-final-multiseed"]
    assert final["entrypoint"] == "flows/pipeline.py:pipeline"
    limit = final["concurrency_limit"]
    assert (limit["limit"] if isinstance(limit, dict) else limit) == 1
    from flows.params import PipelineParams

    p = PipelineParams.model_validate(final["parameters"]["params"])
    assert p.seeds == [42, 43, 44] and p.deterministic is True and p.execution == "distributed"
    # Every GPU stage of the distributed run goes to a deployment of the right flow on the gpu pool, and the
    # parameter defaults name the same deployments (a UI run of rts-pipeline with execution distributed).
    from flows.params import DistributedParams

    dist, defaults = p.distributed, DistributedParams()
    for flow, name, default in (
        ("train-seed", dist.deployment, defaults.deployment),
        ("logit-cache", dist.logit_cache_deployment, defaults.logit_cache_deployment),
        ("evaluate-test", dist.evaluate_test_deployment, defaults.evaluate_test_deployment),
    ):
        assert name == default, f"rts-final-multiseed's {flow} deployment differs from the default"
        flow_name, _, dep_name = name.partition("/")
        target = DEPLOYMENTS[dep_name]
        assert flow_name == flow and _flow(target["entrypoint"]).name == flow_name, name
        assert target["work_pool"]["name"] == "gpu", name
    assert dist.max_attempts >= 2, "a pre-empted child run is re-submitted"

    pull = DOC["pull"][0]["prefect.deployments.steps.set_working_directory"]
    assert pull["directory"] == "{{ $RTS_PROJECT_DIR }}"


@pytest.mark.parametrize("name", sorted(DEPLOYMENTS))
def test_every_flow_run_beats_often_enough_for_the_zombie_automation(name: str) -> None:
    """deployments/zombie_automation.py crashes a run with no event for --within seconds (90 by default, 60 in the
    server tests) after a heartbeat. Prefect's default heartbeat is 180 s, so every pool's runs -- the CPU pool's
    map-region and distributed rts-pipeline runs, which wait on their GPU children for minutes without another
    event, too -- beat every 30 s (issue 14: a map-region run was crashed while its chunks ran)."""
    env = DEPLOYMENTS[name]["work_pool"].get("job_variables", {}).get("env", {})
    assert env.get("PREFECT_FLOWS_HEARTBEAT_FREQUENCY") == "30", f"{name}: job_variables.env heartbeat"


@pytest.mark.parametrize("name", sorted(DEPLOYMENTS))
def test_every_flow_run_starts_with_the_guides_hash_seed(name: str) -> None:
    """Guide §2.2: PYTHONHASHSEED 42, read by Python only at start-up: the job environment of the flow-run
    process sets it (process, Docker, Kubernetes and Vertex AI workers all take an `env` job variable)."""
    from prefect.workers.process import ProcessWorker

    env = DEPLOYMENTS[name]["work_pool"].get("job_variables", {}).get("env", {})
    assert env.get("PYTHONHASHSEED") == "42", f"{name}: job_variables.env.PYTHONHASHSEED"
    assert "env" in ProcessWorker.job_configuration_variables.model_fields  # type: ignore[attr-defined]


def test_kubernetes_gpu_template_adds_node_selector_and_gpu_limit() -> None:
    add = runpy.run_path(str(ROOT / "deployments" / "gpu_job_template.py"))["add_gpu_variables"]
    base = {
        "job_configuration": {
            "job_manifest": {
                "apiVersion": "batch/v1",
                "kind": "Job",
                "spec": {"template": {"spec": {"containers": [{"name": "prefect-job", "image": "{{ image }}"}]}}},
            }
        },
        "variables": {"type": "object", "properties": {"image": {"type": "string"}}},
    }
    out = add(base)
    pod = out["job_configuration"]["job_manifest"]["spec"]["template"]["spec"]
    assert pod["nodeSelector"]["cloud.google.com/gke-accelerator"] == "{{ accelerator_type }}"
    assert pod["containers"][0]["resources"]["limits"]["nvidia.com/gpu"] == "{{ accelerator_count }}"
    assert {"accelerator_type", "accelerator_count", "image"} <= set(out["variables"]["properties"])
    assert add(out) == out, "idempotent"


def test_the_scheduled_gpu_run_ships_paused_and_the_docs_say_how_to_activate_it() -> None:
    """`prefect deploy --all` must not start spending GPU hours every Sunday: the schedule Prefect creates from
    prefect.yaml is inactive, and docs/cloud.md gives the commands that activate it."""
    from prefect.cli.deploy._schedules import _schedule_config_to_deployment_schedule
    from prefect.client.schemas.actions import DeploymentScheduleCreate

    for dep in DOC["deployments"]:
        for spec in dep.get("schedules") or []:
            assert spec.get("active") is False, f"{dep['name']}: a shipped schedule must say `active: false`"
            created = DeploymentScheduleCreate(**_schedule_config_to_deployment_schedule(spec))
            assert created.active is False, f"{dep['name']}: prefect deploy would create an active schedule"
    assert DEPLOYMENTS["rts-final-multiseed"]["schedules"], "the weekly final run keeps its (paused) schedule"
    docs = (ROOT / "docs" / "cloud.md").read_text()
    assert "prefect deployment schedule resume rts-pipeline/rts-final-multiseed" in docs
    assert "active: true" in docs


def test_mapping_deployments_map_region_on_cpu_fans_out_to_map_chunk_on_gpu() -> None:
    """Issue 14: map-region/rts-map-region on the CPU pool, map-chunk/stage-map-chunk on the GPU pool; the UI form
    takes the package, the input and the output; map-region's chunk deployment (its default and prefect.yaml's) is
    map-chunk's."""
    from flows.params.mapping import MapChunkParams, MapDistributedParams, MapRegionParams

    region, chunk = DEPLOYMENTS["rts-map-region"], DEPLOYMENTS["stage-map-chunk"]
    assert region["entrypoint"] == "flows/mapping.py:map_region" and region["work_pool"]["name"] == "cpu-process"
    assert chunk["entrypoint"] == "flows/mapping.py:map_chunk" and chunk["work_pool"]["name"] == "gpu"
    jv = chunk["work_pool"]["job_variables"]
    assert jv["accelerator_type"] and int(jv["accelerator_count"]) >= 1
    assert _flow(region["entrypoint"]).name == "map-region" and _flow(chunk["entrypoint"]).name == "map-chunk"
    assert _params_model(_flow(region["entrypoint"])) is MapRegionParams
    assert _params_model(_flow(chunk["entrypoint"])) is MapChunkParams
    for model in (MapRegionParams, MapChunkParams):
        assert {"package", "input", "output"} <= {n for n, f in model.model_fields.items() if f.is_required()}
    p = MapRegionParams.model_validate(region["parameters"]["params"])
    assert p.execution == "distributed" and p.distributed.max_attempts >= 2
    for name in (p.distributed.deployment, MapDistributedParams().deployment):
        flow_name, _, dep_name = name.partition("/")
        assert flow_name == _flow(DEPLOYMENTS[dep_name]["entrypoint"]).name == "map-chunk", name
        assert DEPLOYMENTS[dep_name]["work_pool"]["name"] == "gpu", name


def test_the_mapping_forms_default_to_what_a_fresh_checkout_makes_with_its_first_commands() -> None:
    """Issue 22: the map-region form pointed at data/scenes, which nothing makes. The package is the one `make
    quickstart` writes, the input the data root that docs/commands.md's `rts synth-geotiff` line writes, and
    every config a deployment names is in the repository."""
    quickstart_run = re.search(r"^RUN \?= (\S+)$", (ROOT / "Makefile").read_text(), re.M)
    assert quickstart_run is not None
    synth = re.search(r"^rts synth-geotiff .*--output (\S+)", (ROOT / "docs" / "commands.md").read_text(), re.M)
    assert synth is not None
    for name in ("rts-map-region", "stage-map-chunk"):
        params = DEPLOYMENTS[name]["parameters"]["params"]
        assert params["package"] == f"{quickstart_run.group(1)}/package", name
        assert params["input"] == synth.group(1), name
    for name, dep in DEPLOYMENTS.items():
        config = dep["parameters"]["params"].get("config")
        assert config is None or (ROOT / config).is_file(), f"{name}: {config}"


def test_sweep_deployment_on_cpu_fans_every_variant_and_seed_out_to_train_seed_on_gpu() -> None:
    """Issue 24: sweep/rts-sweep on the CPU pool, a typed form (SweepParams) whose defaults name a sweep file of the
    repository (planned here as the flow plans it) and, distributed, the GPU deployments of the right flows."""
    from flows.params import DistributedParams
    from flows.params.sweep import SweepParams, default_sweep_dir
    from rtscore.sweep.config import load_sweep_config
    from rtscore.sweep.plan import plan_sweep

    dep = DEPLOYMENTS["rts-sweep"]
    assert dep["entrypoint"] == "flows/sweep.py:sweep" and dep["work_pool"]["name"] == "cpu-process"
    assert _flow(dep["entrypoint"]).name == "sweep"
    assert _params_model(_flow(dep["entrypoint"])) is SweepParams
    raw = dep["parameters"]["params"]
    p = SweepParams.model_validate(raw)
    assert (ROOT / p.sweep).is_file(), p.sweep
    assert p.sweep_dir == default_sweep_dir(raw), "the form's directory is the one `rts sweep` would use"
    assert p.execution == "distributed" and p.distributed.max_attempts >= 2
    sweep_cfg, base = load_sweep_config(ROOT / p.sweep)
    plan = plan_sweep(sweep_cfg, base, str(ROOT / p.sweep_dir))
    assert len(plan.variants) >= 2 and plan.baseline in {v.name for v in plan.variants}
    dist, defaults = p.distributed, DistributedParams()
    for flow, name, default in (
        ("train-seed", dist.deployment, defaults.deployment),
        ("logit-cache", dist.logit_cache_deployment, defaults.logit_cache_deployment),
        ("evaluate-test", dist.evaluate_test_deployment, defaults.evaluate_test_deployment),
    ):
        assert name == default, f"sweep's {flow} deployment differs from the default"
        flow_name, _, dep_name = name.partition("/")
        assert flow_name == flow and _flow(DEPLOYMENTS[dep_name]["entrypoint"]).name == flow, name
        assert DEPLOYMENTS[dep_name]["work_pool"]["name"] == "gpu", name


# What a user starts; every other deployment is one stage (re-run alone, or a distributed run's child).
MAIN_DEPLOYMENTS = {
    "rts-pipeline",
    "rts-final-multiseed",
    "rts-sweep",
    "rts-tile-scenes",
    "rts-map-region",
    "rts-review-export",
    "rts-review-ingest",
}
UI_PAGE = 10  # deployments per page of the Prefect UI's list, which it sorts by name (A to Z) unless told


def test_the_deployments_a_user_starts_fill_the_first_page_of_the_uis_list() -> None:
    """Issue 38: the pipeline, the sweep and the review deployments were on page 2 of the UI's list (calibrate, data-
    pipeline, evaluate-test... came first). The list sorts by deployment name, in the server database's collation."""
    names = list(DEPLOYMENTS)
    for order in (sorted(names), sorted(names, key=str.casefold)):  # byte order (SQLite), case-blind (PostgreSQL)
        assert set(order[: len(MAIN_DEPLOYMENTS)]) == MAIN_DEPLOYMENTS, order[:UI_PAGE]
    assert len(MAIN_DEPLOYMENTS) <= UI_PAGE
    for name in set(names) - MAIN_DEPLOYMENTS:
        assert name == f"stage-{_flow(DEPLOYMENTS[name]['entrypoint']).name}", name


def test_the_shipped_schedule_is_one_the_uis_list_shows_as_paused() -> None:
    """Issue 38: the list showed the weekly cron as "1 schedules" (its text, "At 02:00 AM, only on Sunday", does not
    fit the list's column), hiding that it is paused. An interval of 7 days from a Sunday 02:00 UTC is the same
    schedule and fits ("Paused  Every 1 week")."""
    from datetime import datetime, timedelta

    from prefect.cli.deploy._schedules import _schedule_config_to_deployment_schedule
    from prefect.client.schemas.actions import DeploymentScheduleCreate
    from prefect.client.schemas.schedules import IntervalSchedule

    ((spec,),) = [d["schedules"] for d in DOC["deployments"] if d.get("schedules")]  # the weekly final run's
    created = DeploymentScheduleCreate(**_schedule_config_to_deployment_schedule(spec))
    assert created.active is False and isinstance(created.schedule, IntervalSchedule), created
    assert created.schedule.interval == timedelta(days=7) and created.schedule.timezone == "UTC"
    anchor = created.schedule.anchor_date
    assert anchor.utcoffset() == timedelta(0) and (anchor.weekday(), anchor.hour, anchor.minute) == (6, 2, 0)
    assert anchor <= datetime.now(anchor.tzinfo), "the first run is not held back to a later anchor"
