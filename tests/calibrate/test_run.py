from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from rtscore import stages
from rtscore.calibrate.cache import CacheError, LogitCache
from rtscore.calibrate.run import (
    CalibrationPlots,
    ParityError,
    SeedCalibrationReport,
    TargetPrecisionError,
    calibrate_seed,
    check_parity,
    run_gates,
)
from rtscore.config.deployment import DeploymentConfig
from rtscore.storage import StorageError
from tests.calibrate.conftest import SEEDS, calib_config


@pytest.fixture(scope="module")
def calibrated(model_run: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    from tests.helpers import copy_run

    run = copy_run(model_run, tmp_path_factory.mktemp("calibrated") / "run")  # with each seed's logit cache
    stages.calibrate(str(run), calib_config())
    return run


def test_calibrate_writes_threshold_and_temperature_into_the_deployment_configs(calibrated: Path) -> None:
    run = calibrated
    final = yaml.safe_load((run / "calibration/deployment_config.yaml").read_text())
    assert final["threshold"] is not None and final["temperature"] is not None
    for s in SEEDS:
        dep = DeploymentConfig.model_validate(
            yaml.safe_load((run / f"calibration/seed_{s}/deployment_config.yaml").read_text())
        )
        assert dep.threshold is not None and 0 < dep.threshold < 1 and dep.temperature is not None
        report = SeedCalibrationReport.model_validate_json(
            (run / f"calibration/seed_{s}/calibration_report.json").read_text()
        )
        assert report.operating.threshold == dep.threshold
        assert dep.temperature == report.temperature.T
        assert report.temperature.nll_after <= report.temperature.nll_before + 1e-12
        assert [t.ratio for t in report.thresholds] == [200, 500, 1000]
        for png in ("reliability.png", "pr_curves.png"):
            assert (run / f"calibration/seed_{s}/{png}").read_bytes()[:4] == b"\x89PNG"
    gates = json.loads((run / "calibration/gates.json").read_text())
    assert gates["tta"]["chosen"] == final["tta"] and "reason" in gates["scales"]
    manifest = json.loads((run / "manifest.json").read_text())["artifacts"]
    assert manifest["calibration/deployment_config.yaml"]["stage"] == "calibrate"


def _gated(run: Path, tmp_path: Path, **changes: object) -> tuple[DeploymentConfig, Path, LogitCache]:
    cache = LogitCache(run / "calibration/seed_1/logit_cache.zarr")
    dep = DeploymentConfig(precision="fp32").model_copy(update=changes)
    return dep, tmp_path / "deployment_config.yaml", cache


def _plots(tmp_path: Path) -> CalibrationPlots:
    return CalibrationPlots(reliability=tmp_path / "r.png", pr_curves=tmp_path / "p.png")


@pytest.mark.parametrize(
    ("changes", "field"),
    [
        ({"precision": "bf16"}, "precision: 'bf16' in the file, 'fp32' in the logit cache"),
        ({"torch_compile": True}, "torch_compile: True in the file"),
        ({"scales": [1.0, 0.75], "fusion": "max"}, "scales/fusion"),
    ],
)
def test_parity_mismatch_is_refused_naming_the_field(
    calibrated: Path, tmp_path: Path, changes: dict, field: str
) -> None:
    dep, path, cache = _gated(calibrated, tmp_path, **changes)
    with pytest.raises(ParityError) as err:
        calibrate_seed(dep, cache, calib_config(), _plots(tmp_path), source=path)
    assert field in str(err.value) and str(path) in str(err.value)
    assert not path.exists() and not list(tmp_path.glob("*.png")), "nothing written on refusal"


def test_parity_refuses_a_tta_the_cache_did_not_measure(calibrated: Path, tmp_path: Path) -> None:
    _, path, cache = _gated(calibrated, tmp_path, tta="full")
    cfg = calib_config(tta_candidates=["none", "minimal"])
    cache.attrs["tta_candidates"] = list(cfg.calibration.tta_candidates)  # as if cached with fewer candidates
    with pytest.raises(ParityError, match="tta: 'full' in the file"):
        check_parity(DeploymentConfig(precision="fp32", tta="full"), cache, path)


def test_gates_can_be_switched_off(calibrated: Path) -> None:
    cfg = calib_config(tta_gate=False, scale_gate=False)
    cfg = cfg.model_copy(update={"deployment": cfg.deployment.model_copy(update={"tta": "minimal"})})
    caches = [LogitCache(calibrated / f"calibration/seed_{s}/logit_cache.zarr") for s in SEEDS]
    dep, gates = run_gates(cfg, caches)
    assert dep.tta == "minimal" and dep.scales == [1.0] and dep.threshold is None
    assert "tta_gate is false" in gates["tta"]["reason"]


def test_stale_cache_and_missing_inputs_are_refused(calibrated: Path, tmp_path: Path) -> None:
    from tests.helpers import copy_run

    run = copy_run(calibrated, tmp_path / "run")
    weights = run / "seeds/seed_2/best_deployment.pth"
    weights.write_bytes(weights.read_bytes() + b"\0")  # retrained since the cache was built
    with pytest.raises(CacheError, match="other weights"):
        stages.calibrate(str(run), calib_config())
    (run / "calibration/seed_1/logit_cache.zarr").rename(run / "moved.zarr")
    with pytest.raises(StorageError, match="logit_cache.zarr is missing"):
        stages.calibrate(str(run), calib_config())


# --------------------------------------------------------------------------- issue 11: honest outcomes
def test_unreachable_target_precision_stops_calibration_naming_the_best_precision(
    calibrated: Path, tmp_path: Path
) -> None:
    dep, path, cache = _gated(calibrated, tmp_path)
    with pytest.raises(TargetPrecisionError) as err:
        cfg = calib_config(target_precision=1.0, allow_max_f1_fallback=False)
        calibrate_seed(dep, cache, cfg, _plots(tmp_path), source=path)
    msg = str(err.value)
    assert "calibration.target_precision 1.0 is not reachable at 1:200" in msg
    assert "the best precision reached is" in msg and "at threshold" in msg
    assert "calibration.allow_max_f1_fallback" in msg
    assert not path.exists() and not list(tmp_path.glob("*.png")), "nothing written on refusal"


def test_an_opted_in_fallback_is_recorded_as_the_threshold_source(calibrated: Path, tmp_path: Path) -> None:
    dep, path, cache = _gated(calibrated, tmp_path)
    cfg = calib_config(target_precision=1.0, allow_max_f1_fallback=True)
    frozen, report = calibrate_seed(dep, cache, cfg, _plots(tmp_path), source=path)
    assert frozen.threshold_source == "max_f1_fallback" == report.threshold_source
    assert not report.operating.target_reached and frozen.threshold == report.operating.threshold
    assert report.deployment_config == str(path)


def test_calibration_records_the_numerics_it_measured(calibrated: Path) -> None:
    for s in SEEDS:
        dep = DeploymentConfig.model_validate(
            yaml.safe_load((calibrated / f"calibration/seed_{s}/deployment_config.yaml").read_text())
        )
        assert dep.calibrated_with is not None and dep.calibrated_with == dep.numerics()
        assert (
            dep.calibrated_with.precision
            == LogitCache(calibrated / f"calibration/seed_{s}/logit_cache.zarr").attrs["precision"]
        )
        assert dep.threshold_source in ("target_precision", "max_f1_fallback")


@pytest.mark.parametrize("allow", [False, True])
def test_the_scale_gate_verdict_ships_only_when_the_config_allows_it(
    calibrated: Path, monkeypatch: pytest.MonkeyPatch, allow: bool
) -> None:
    import rtscore.calibrate.run as run_module
    from rtscore.calibrate.decisions import GateDecision

    def passing_gate(*_: object) -> GateDecision:  # a gate whose verdict is multi-scale with 'max' fusion
        return GateDecision("scales", "max", "'max' passes", [], [0.0])

    monkeypatch.setattr(run_module, "scale_gate", passing_gate)
    caches = [LogitCache(calibrated / f"calibration/seed_{s}/logit_cache.zarr") for s in SEEDS]
    dep, gates = run_gates(calib_config(tta_gate=False, allow_multiscale_deployment=allow), caches)
    assert gates["scales"]["verdict"] == [1.0, 0.5] and gates["scales"]["verdict_fusion"] == "max"
    if allow:
        assert dep.scales == [1.0, 0.5] and dep.fusion == "max" and gates["scales"]["shipped"]
    else:
        assert dep.scales == [1.0] and not gates["scales"]["shipped"]
        assert "allow_multiscale_deployment is false" in gates["scales"]["reason"]


def test_without_a_context_store_the_scale_gate_is_not_evaluated_and_shipping_half_scale_is_refused(
    calibrated: Path, tmp_path: Path
) -> None:
    import shutil

    from rtscore.calibrate.run import CalibrationError
    from rtscore.storage import RunDir
    from tests.helpers import copy_run

    run = copy_run(calibrated, tmp_path / "run")
    shutil.rmtree(run / "datasets" / "context" / "val.zarr", ignore_errors=True)  # as a GeoTIFF root: no 0.5x context
    RunDir(str(run)).forget("datasets/context/val.zarr")
    cfg = calib_config(allow_max_f1_fallback=True)
    stages.logit_cache(str(run), cfg, 1)
    cache = LogitCache(run / "calibration/seed_1/logit_cache.zarr")
    assert cache.attrs["scale_candidates"] == [1.0]  # 0.5x is never made by shrinking the tile
    assert "not evaluated: no context-expanded 0.5x val store" in cache.attrs["scales_not_evaluated"]
    stages.calibrate(str(run), cfg, seeds=[1])
    gates = json.loads((run / "calibration/gates.json").read_text())
    assert gates["scales"]["evaluated"] is False and gates["scales"]["chosen"] == [1.0]
    assert gates["scales"]["reason"].startswith("not evaluated: no context-expanded 0.5x val store")
    assert "not evaluated: no context-expanded" in (run / "calibration/report.md").read_text()

    ship = cfg.model_copy(update={"deployment": cfg.deployment.model_copy(update={"scales": [1.0, 0.5]})})
    with pytest.raises(CalibrationError, match=r"deployment.scales is \[1.0, 0.5\].*no context-expanded 0.5x"):
        stages.logit_cache(str(run), ship, 1)
    allow = calib_config(allow_max_f1_fallback=True, allow_multiscale_deployment=True)
    with pytest.raises(CalibrationError, match="allow_multiscale_deployment is true"):
        stages.calibrate(str(run), allow, seeds=[1])


def test_evaluate_test_reports_the_canonical_1x_table_and_the_multiscale_one_beside_it(
    calibrated: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import rtscore.calibrate.run as run_module
    from rtscore.calibrate.decisions import GateDecision
    from tests.helpers import copy_run

    def passing_gate(*_: object) -> GateDecision:  # the gate's verdict: [1.0, 0.5] with 'max' fusion
        return GateDecision("scales", "max", "'max' passes", [], [0.0])

    monkeypatch.setattr(run_module, "scale_gate", passing_gate)
    run = copy_run(calibrated, tmp_path / "run")
    cfg = calib_config(tta_gate=False, allow_multiscale_deployment=True, allow_max_f1_fallback=True)
    stages.calibrate(str(run), cfg)
    for s in SEEDS:
        shipped = DeploymentConfig.model_validate(
            yaml.safe_load((run / f"calibration/seed_{s}/deployment_config.yaml").read_text())
        )
        one = DeploymentConfig.model_validate(
            yaml.safe_load((run / f"calibration/seed_{s}/deployment_config_1x.yaml").read_text())
        )
        assert shipped.scales == [1.0, 0.5] and one.scales == [1.0] and one.tta == shipped.tta
        assert one.calibrated_with is not None and one.calibrated_with.scales == [1.0]
        report = SeedCalibrationReport.model_validate_json(
            (run / f"calibration/seed_{s}/calibration_report.json").read_text()
        )
        assert report.canonical_1x is not None and report.canonical_1x.operating.threshold == one.threshold

    result = stages.evaluate_test(str(run), cfg)
    rep = result.report
    assert rep.scales == [1.0] and rep.multiscale is not None  # the canonical table is 1x
    assert rep.multiscale.scales == [1.0, 0.5] and rep.multiscale.fusion == "max"
    for s, row in zip(SEEDS, rep.per_seed, strict=True):
        one = DeploymentConfig.model_validate(
            yaml.safe_load((run / f"calibration/seed_{s}/deployment_config_1x.yaml").read_text())
        )
        assert row.threshold == one.threshold and row.temperature == one.temperature
    assert rep.multiscale.per_seed[0].metrics != rep.per_seed[0].metrics  # another configuration was run
    table = result.table
    assert table.index("Test-Realistic") < table.index("Multi-scale deployment (tta none, scales [1.0, 0.5]")
    md = (run / "evaluation/test_report.md").read_text()
    assert "Canonical 1x result" in md and "# Multi-scale deployment" in md
    # issue 36: the canonical result per region (a synthetic store has no latitudes: one line) and per object
    assert rep.by_region is not None and rep.by_latitude is not None and rep.multiscale.by_region is None
    assert sum(g.n_tiles for g in rep.by_region.groups) == rep.per_seed[0].n_pos_tiles + rep.per_seed[0].n_neg_tiles
    assert rep.by_latitude.groups == [] and "Not made: the test store records no tile latitudes" in md
    objects = (run / "evaluation/test_objects.csv").read_text().splitlines()
    seeds = ",".join(f"found_seed_{s}" for s in SEEDS)
    assert objects[0] == f"tile_id,region,latitude,uids,area_m2,{seeds},found_seeds" and len(objects) > 1
    assert "evaluation/test_objects.csv" in {a.path for a in result.artifacts} and "test_objects.csv" in md


def test_a_seed_trained_with_model_overrides_is_refused_without_them_naming_them(
    run_copy: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """Issue 38: a seed trained with a model --overrides and calibrated without it ended in a raw state_dict
    size-mismatch traceback. The seed's run_summary.json records the model it was trained as: a config describing
    another architecture is refused before the weights are loaded, naming the field, both values and the override
    to pass; `rts calibrate` says so in one line before Prefect's server starts, and nothing is written."""
    from flows.cli.main import main
    from rtscore.config.base import dump_yaml
    from rtscore.models import CheckpointError

    trained = calib_config()  # the seeds' model: decoder_channels [16, 16, 8, 8, 8]
    without = trained.model_copy(update={"model": trained.model.model_copy(update={"decoder_channels": None})})
    manifest = (run_copy / "manifest.json").read_bytes()
    with pytest.raises(CheckpointError) as err:
        stages.logit_cache(str(run_copy), without, 1)
    assert "seed 1: " in str(err.value) and "model.decoder_channels: [16, 16, 8, 8, 8] when trained, None now" in str(
        err.value
    )
    assert """--overrides '{"model.decoder_channels": [16, 16, 8, 8, 8]}'""" in str(err.value)

    def refuse() -> None:
        raise AssertionError("Prefect's temporary server was started before the command's checks")

    monkeypatch.setattr("flows.common.start_local_api", refuse)
    dump_yaml(without, tmp_path / "without.yaml")
    assert main(["calibrate", "--config", str(tmp_path / "without.yaml"), "--run", str(run_copy)]) == 2
    out = capsys.readouterr().err
    assert (
        out.startswith("rts calibrate: error: seed 1: ") and "model.decoder_channels" in out and "Traceback" not in out
    )
    assert (run_copy / "manifest.json").read_bytes() == manifest
