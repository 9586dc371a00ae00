"""The deployment package: build from a fake run, audit without unpickling, load and run one tile."""

from __future__ import annotations

import io
import json
import os
import pickle
import shlex
import shutil
import subprocess
import zipfile
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch
import yaml

from flows.cli.main import main
from rtscore.config import parse_pipeline_config
from rtscore.config.binding import RasterContract
from rtscore.config.pipeline import PipelineConfig
from rtscore.data.normalization.stats import NormalizationStats, NormalizationStatsError, write_normalization_stats
from rtscore.data.store.attrs import StoreAttrs
from rtscore.models import build_model
from rtscore.package import (
    PACKAGE_FILES,
    SUMS,
    PackagedModelConfig,
    PackageError,
    PackageInfo,
    RunMetadata,
    audit_package,
    build_package,
    package_sha256,
    pickle_globals,
    verify_package,
    write_sha256sums,
)
from rtscore.storage import StorageError, sha256_file
from rtscore.train.result import SeedSummary, read_seed_summary
from tests.helpers import alter_weights_tensor, calibrated_deployment, store_attrs_doc, tiny_pipeline_config

METRICS = {42: 0.31, 43: 0.47}
CONTRACT = RasterContract(crs="EPSG:3857", pixel_size=4.77)  # what the train store records


def package_config(precision: str = "fp32", **package: Any) -> PipelineConfig:
    data = tiny_pipeline_config(tile=64)
    data["model"] = {
        "architecture": "unet",
        "backbone": "mobilenet_v2",
        "encoder_weights": None,
        "decoder_channels": [16, 16, 8, 8, 8],
    }
    data["training"]["precision"] = precision
    data["deployment"] = {"precision": precision}
    data["mlflow"] = {"enabled": False}
    data["package"] = package
    return parse_pipeline_config(data)


def write_stats(path: Path, extra: list[str]) -> None:
    names = ["R", "G", "B", *extra]
    write_normalization_stats(
        NormalizationStats(
            channel_names=names,
            mean=np.linspace(50.0, 80.0, len(names)),
            std=np.linspace(20.0, 30.0, len(names)),
            n_tiles_used=16,
            dataset_version="t",
            computed_date="2026-01-01T00:00:00Z",
        ),
        path,
    )


def write_deployment(
    path: Path, precision: str, *, threshold: float | None = 0.42, temperature: float | None = 1.3, **fields: Any
) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    dep = calibrated_deployment(threshold=threshold, temperature=temperature, precision=precision, **fields)
    path.write_text(yaml.safe_dump(dep.model_dump(mode="json"), sort_keys=False))


def make_fake_run(run: Path, cfg: PipelineConfig) -> Path:
    """Two trained seeds (random tiny models), their run summaries, stats and calibrated deployment configs."""
    for i, (seed, metric) in enumerate(METRICS.items()):
        torch.manual_seed(seed)
        model = build_model(cfg.model, cfg.channels)
        seed_dir = run / "seeds" / f"seed_{seed}"
        seed_dir.mkdir(parents=True)
        torch.save({k: v.detach().clone() for k, v in model.state_dict().items()}, seed_dir / "best_deployment.pth")
        write_deployment(run / "calibration" / f"seed_{seed}" / "deployment_config.yaml", cfg.training.precision)
        summary = SeedSummary(
            seed=seed,
            epochs_run=20,
            stopped_early=False,
            best_epoch=10 + i,
            best_val_realistic_pr_auc_geomean_smoothed=metric,
            last_validation={},
            overfitting={},
            model=cfg.model,
            mlflow_run_id=f"run{seed}",
        )
        (seed_dir / "run_summary.json").write_text(summary.model_dump_json())
    write_stats(run / "normalization_stats.json", [c.name for c in cfg.channels.extra])
    return run


def build(run: Path, cfg: PipelineConfig, seed: int = 43) -> PackageInfo:
    """The package of ``seed`` (the seed calibration decided to ship) into ``run/package``."""
    return build_package(
        run / "package",
        cfg,
        seed=read_seed_summary(run / "seeds" / f"seed_{seed}" / "run_summary.json"),
        weights=run / "seeds" / f"seed_{seed}" / "best_deployment.pth",
        deployment=run / "calibration" / f"seed_{seed}" / "deployment_config.yaml",
        stats=run / "normalization_stats.json",
        contract=CONTRACT,
    )


@pytest.fixture(scope="module")
def base_run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return make_fake_run(tmp_path_factory.mktemp("pkg") / "run", package_config())


@pytest.fixture
def run(base_run: Path, tmp_path: Path) -> Path:
    return Path(shutil.copytree(base_run, tmp_path / "run"))


@pytest.fixture(scope="module")
def built(tmp_path_factory: pytest.TempPathFactory, base_run: Path) -> Path:
    """A package built once; tests that tamper with it work on copies."""
    run = Path(shutil.copytree(base_run, tmp_path_factory.mktemp("built") / "run"))
    return Path(build(run, package_config()).path)


@pytest.fixture
def pkg(built: Path, tmp_path: Path) -> Path:
    return Path(shutil.copytree(built, tmp_path / "package"))


def checks(report: Any) -> dict[str, Any]:
    return {c.name: c for c in report.checks}


def failed(report: Any) -> set[str]:
    return {c.name for c in report.failures()}


# --------------------------------------------------------------------------- build
def test_build_and_verify(built: Path) -> None:
    assert sorted(p.name for p in built.iterdir()) == sorted(PACKAGE_FILES)
    assert not list(built.parent.glob(".package*")), "no staging directory left behind"
    # best seed (43) ships, its bytes unchanged
    run = built.parent
    src = run / "seeds" / "seed_43" / "best_deployment.pth"
    assert (built / "weights.pth").read_bytes() == src.read_bytes()
    meta = RunMetadata.model_validate_json((built / "run_metadata.json").read_text())
    assert (meta.seed, meta.epoch, meta.best_metric, meta.mlflow_run_id) == (43, 11, 0.47, "run43")
    assert meta.best_metric_name == "val_realistic_pr_auc_geomean"
    assert meta.trained_with.precision == "fp32" and meta.trained_with.seed == 43
    assert meta.training_date.endswith("Z") and meta.git_sha
    model = PackagedModelConfig.model_validate(yaml.safe_load((built / "model_config.yaml").read_text()))
    assert model.in_channels == 4 and model.channels.names == ["R", "G", "B", "ndvi"]
    assert model.channels.extra[0].band == 0 and model.tile_size == 64 and model.output == "logits"
    reqs = (built / "requirements_frozen.txt").read_text().splitlines()
    names = [r.split("==")[0].lower() for r in reqs]
    assert "torch" in names and names == sorted(set(names))
    assert (built / "deployment_config.yaml").read_bytes() == (
        run / "calibration" / "seed_43" / "deployment_config.yaml"
    ).read_bytes()

    report = verify_package(built)
    assert report.ok, [c for c in report.checks if not c.ok]
    names = [c.name for c in report.checks]
    assert names[-2:] == ["load", "forward"] and "weights.pth pickle" in names
    assert "(1, 1, 64, 64)" in checks(report)["forward"].detail


@pytest.mark.parametrize("image_sha", ["0123456789abcdef0123456789abcdef01234567", None])
def test_a_package_built_without_a_checkout_records_the_images_commit_and_never_guesses_one(
    run: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, image_sha: str | None
) -> None:
    """A worker of the image (no .git in it, guide §4.3 git_sha, §10.1): the commit is the image's build argument
    (Dockerfile ARG GIT_SHA -> RTS_GIT_SHA); an image built without it records 'unknown'."""
    monkeypatch.setenv("GIT_DIR", str(tmp_path / "no-git"))  # git finds no repository, as in the image
    if image_sha is None:
        monkeypatch.delenv("RTS_GIT_SHA", raising=False)
    else:
        monkeypatch.setenv("RTS_GIT_SHA", image_sha)
        monkeypatch.setenv("RTS_GIT_DIRTY", "false")
    build(run, package_config())
    meta = RunMetadata.model_validate_json((run / "package" / "run_metadata.json").read_text())
    assert meta.git_sha == (image_sha or "unknown")
    if image_sha is None:
        assert (meta.git_sha, meta.git_dirty, meta.git_source) == ("unknown", None, "none")
    else:
        assert (meta.git_sha, meta.git_dirty, meta.git_source) == (image_sha, False, "image")
    audit = next(c for c in audit_package(run / "package") if c.name == "run_metadata.json")
    assert audit.ok and f"git {meta.git_sha[:12]} ({meta.git_source})" in audit.detail


def test_run_metadata_refuses_a_commit_that_contradicts_its_source(built: Path) -> None:
    """A package written before git_source reads as before; a recorded source must agree with git_sha."""
    doc = json.loads((built / "run_metadata.json").read_text())
    old = {k: v for k, v in doc.items() if k != "git_source"}
    assert RunMetadata.model_validate(old).git_source is None
    with pytest.raises(ValueError, match="git_source is 'none' but git_sha is"):
        RunMetadata.model_validate({**old, "git_sha": "0" * 40, "git_source": "none"})
    with pytest.raises(ValueError, match="git_source is 'image' but git_sha is 'unknown'"):
        RunMetadata.model_validate({**old, "git_sha": "unknown", "git_source": "image"})


def test_sha256sums_is_sha256sum_compatible(built: Path) -> None:
    if shutil.which("sha256sum") is None:
        pytest.skip("sha256sum not installed")
    out = subprocess.run(["sha256sum", "-c", "SHA256SUMS"], cwd=built, capture_output=True, text=True, check=True)
    assert out.stdout.count(": OK") == len(PACKAGE_FILES) - 1


def test_an_intact_packages_identity_is_the_sha256_of_its_sha256sums(built: Path) -> None:
    """rtscore.package.format owns both: the SHA256SUMS text the build writes and the identity a campaign records."""
    assert package_sha256(built) == sha256_file(built / SUMS)


def test_the_given_seed_ships(run: Path) -> None:
    info = build(run, package_config(), seed=42)
    assert info.seed == 42 and {f.name for f in info.files} == set(PACKAGE_FILES)
    meta = json.loads((run / "package" / "run_metadata.json").read_text())
    assert meta["seed"] == 42 and meta["epoch"] == 10


def test_an_untrained_seed_is_refused(run: Path) -> None:
    with pytest.raises(StorageError, match="seed summary not found"):
        build(run, package_config(), seed=7)
    assert not (run / "package").exists()


def test_null_threshold_refused_and_old_package_intact(run: Path) -> None:
    cfg = package_config()
    build(run, cfg, seed=42)
    before = {p.name: p.read_bytes() for p in (run / "package").iterdir()}
    cal = run / "calibration" / "seed_43" / "deployment_config.yaml"
    write_deployment(cal, "fp32", threshold=None)
    with pytest.raises(PackageError, match=r"seed_43/deployment_config.yaml: threshold null.*run calibrate first"):
        build(run, cfg, seed=43)
    assert {p.name: p.read_bytes() for p in (run / "package").iterdir()} == before
    assert sorted(p.name for p in run.iterdir()) == ["calibration", "normalization_stats.json", "package", "seeds"]

    shutil.rmtree(run / "package")
    write_deployment(cal, "fp32", temperature=None)
    with pytest.raises(PackageError, match="temperature null"):
        build(run, cfg, seed=43)
    assert not (run / "package").exists()


def test_build_refuses_bad_inputs(run: Path) -> None:
    cfg = package_config()
    write_stats(run / "normalization_stats.json", ["slope"])
    with pytest.raises(NormalizationStatsError, match=r"\['slope'\].*\['ndvi'\]"):
        build(run, cfg)
    write_stats(run / "normalization_stats.json", ["ndvi"])
    write_deployment(run / "calibration" / "seed_43" / "deployment_config.yaml", "bf16")
    with pytest.raises(PackageError, match="precision bf16 differs from training.precision fp32"):
        build(run, cfg)
    (run / "calibration" / "seed_43" / "deployment_config.yaml").unlink()
    with pytest.raises(PackageError, match="run calibrate first"):
        build(run, cfg)
    assert not (run / "package").exists()


# --------------------------------------------------------------------------- audit
def test_tampered_file_is_a_sha_mismatch(pkg: Path) -> None:
    dep = pkg / "deployment_config.yaml"
    dep.write_text(dep.read_text().replace("threshold: 0.42", "threshold: 0.3"))
    report = verify_package(pkg)
    assert not report.ok
    sums = checks(report)["SHA256SUMS"]
    assert not sums.ok and "deployment_config.yaml: sha256 mismatch" in sums.detail
    assert checks(report)["deployment_config.yaml"].ok  # still a valid config: only the checksum catches it
    assert "skipped" in checks(report)["load"].detail


def test_altered_weights_with_regenerated_sums_fail_the_zip_crc(pkg: Path) -> None:
    """Issue 11.14: a tensor byte of weights.pth changed and SHA256SUMS regenerated: the zip CRC catches it."""
    member = alter_weights_tensor(pkg / "weights.pth")
    write_sha256sums(pkg)
    report = verify_package(pkg)
    assert checks(report)["SHA256SUMS"].ok, "the sums were regenerated: only the zip CRC can tell"
    audit = checks(report)["weights.pth pickle"]
    assert not report.ok and not audit.ok
    assert f"member {member} fails its CRC-32 check" in audit.detail


def test_missing_and_extra_files(pkg: Path) -> None:
    (pkg / "requirements_frozen.txt").unlink()
    (pkg / "notes.txt").write_text("hi")
    report = verify_package(pkg)
    assert {"files", "SHA256SUMS", "requirements_frozen.txt"} <= failed(report)
    detail = checks(report)["files"].detail
    assert "missing ['requirements_frozen.txt']" in detail and "unexpected ['notes.txt']" in detail
    assert "lists requirements_frozen.txt, which is not in the package" in checks(report)["SHA256SUMS"].detail
    assert "does not list notes.txt" in checks(report)["SHA256SUMS"].detail


class _Payload:
    """Unpickling this creates ``path`` (``open(path, "w")`` or ``os.system("touch path")``): only if executed."""

    def __init__(self, path: Path, kind: str) -> None:
        self.path, self.kind = str(path), kind

    def __reduce__(self) -> tuple[Any, ...]:
        if self.kind == "open":
            return (open, (self.path, "w"))
        return (os.system, (f"touch {shlex.quote(self.path)}",))


def _malicious_weights(path: Path, payload: _Payload, protocol: int) -> None:
    """A torch-style zip archive whose data.pkl holds a real tensor entry and a code-executing global."""
    buf = io.BytesIO()
    torch.save({"w": torch.zeros(2)}, buf)
    with zipfile.ZipFile(io.BytesIO(buf.getvalue())) as src, zipfile.ZipFile(path, "w") as dst:
        for item in src.infolist():
            data = src.read(item)
            if item.filename.endswith("/data.pkl"):
                data = pickle.dumps({"w": payload}, protocol=protocol)
            dst.writestr(item, data)


@pytest.mark.parametrize("protocol", [2, 4])
@pytest.mark.parametrize(("kind", "global_name"), [("open", "io.open"), ("system", f"{os.system.__module__}.system")])
def test_disallowed_global_fails_without_execution(
    pkg: Path, tmp_path: Path, protocol: int, kind: str, global_name: str
) -> None:
    # The payload is live: unpickling it does create its file.
    probe = tmp_path / "probe_created"
    obj = pickle.loads(pickle.dumps(_Payload(probe, kind), protocol=protocol))
    if kind == "open":
        obj.close()
    assert probe.exists()

    marker = tmp_path / "pwned"
    _malicious_weights(pkg / "weights.pth", _Payload(marker, kind), protocol)
    write_sha256sums(pkg)  # a consistent package: only the pickle audit can catch it
    report = verify_package(pkg)
    assert not marker.exists(), "the audit executed the pickle"
    assert failed(report) == {"weights.pth pickle", "load", "forward"}
    detail = checks(report)["weights.pth pickle"].detail
    assert detail.startswith("weights.pth: archive/data.pkl") and f"non-allowed globals ['{global_name}']" in detail
    assert "skipped" in checks(report)["load"].detail
    assert not marker.exists()


def test_pickle_scanner() -> None:
    buf = io.BytesIO()
    state = {"a": torch.zeros(2), "b": torch.zeros(2, dtype=torch.long), "c": torch.zeros(1, dtype=torch.bfloat16)}
    state["d"] = torch.nn.Parameter(torch.ones(3))
    torch.save(state, buf)
    with zipfile.ZipFile(io.BytesIO(buf.getvalue())) as z:
        found, problems = pickle_globals(z.read("archive/data.pkl"))
    assert problems == []
    assert {"torch._utils._rebuild_tensor_v2", "torch.FloatStorage", "torch.LongStorage"} <= set(found)
    # STACK_GLOBAL fed from the memo is resolved; a computed operand is a problem in itself
    memo_fed = b"\x80\x04\x8c\x08builtins\x94\x8c\x05print\x94\x93\x94h\x00h\x01\x93\x86."
    assert pickle.loads(memo_fed) == (print, print)
    found, problems = pickle_globals(memo_fed)
    assert found == ["builtins.print", "builtins.print"] and problems == []
    found, problems = pickle_globals(b"\x80\x04\x8c\x02os\x8c\x06systemh\x00\x93.")  # bad memo get
    assert problems and "STACK_GLOBAL" in problems[0]
    assert pickle_globals(b"\x80\x02garbage")[1]


def test_non_zip_weights(pkg: Path) -> None:
    (pkg / "weights.pth").write_bytes(pickle.dumps({"w": [1.0, 2.0]}))
    write_sha256sums(pkg)
    report = verify_package(pkg)
    assert "not a torch zip archive" in checks(report)["weights.pth pickle"].detail


def test_wrong_channel_binding(pkg: Path) -> None:
    doc = json.loads((pkg / "normalization_stats.json").read_text())
    doc["extra"]["channel_names"] = ["slope"]
    (pkg / "normalization_stats.json").write_text(json.dumps(doc))
    write_sha256sums(pkg)
    report = verify_package(pkg)
    assert failed(report) == {"channel binding", "load", "forward"}
    detail = checks(report)["channel binding"].detail
    assert "['R', 'G', 'B', 'slope']" in detail and "['R', 'G', 'B', 'ndvi']" in detail
    assert "normalization_stats.json" in detail and "model_config.yaml" in detail


def test_invalid_config_files_name_file_and_field(pkg: Path) -> None:
    model = yaml.safe_load((pkg / "model_config.yaml").read_text())
    model["in_channels"] = 5
    (pkg / "model_config.yaml").write_text(yaml.safe_dump(model))
    write_deployment(pkg / "deployment_config.yaml", "fp32", temperature=None)
    write_sha256sums(pkg)
    report = verify_package(pkg)
    c = checks(report)
    assert "model_config.yaml" in c["model_config.yaml"].detail and "in_channels (5)" in c["model_config.yaml"].detail
    assert "deployment_config.yaml: temperature null" in c["deployment_config.yaml"].detail
    assert "skipped" in c["channel binding"].detail and "skipped" in c["precision parity"].detail


def test_precision_parity(pkg: Path) -> None:
    meta = json.loads((pkg / "run_metadata.json").read_text())
    meta["trained_with"]["precision"] = "bf16"
    (pkg / "run_metadata.json").write_text(json.dumps(meta))
    write_sha256sums(pkg)
    report = verify_package(pkg)
    assert failed(report) == {"precision parity", "load", "forward"}
    assert "precision fp32 differs from run_metadata.json trained_with.precision bf16" in (
        checks(report)["precision parity"].detail
    )


def test_load_failure_names_the_problem(pkg: Path) -> None:
    state = torch.load(pkg / "weights.pth", weights_only=True)
    state.pop(next(iter(state)))
    torch.save(state, pkg / "weights.pth")
    write_sha256sums(pkg)
    report = verify_package(pkg)
    assert failed(report) == {"load", "forward"}
    assert "Missing key" in checks(report)["load"].detail


@pytest.mark.parametrize("precision", ["bf16", "fp16"])
def test_forward_under_package_precision(tmp_path: Path, precision: str) -> None:
    cfg = package_config(precision)
    run = make_fake_run(tmp_path / "run", cfg)
    report = verify_package(build(run, cfg).path)
    assert report.ok, report.failures()
    detail = checks(report)["forward"].detail
    if precision == "bf16":
        assert detail.startswith("bf16 on cpu")
    else:
        assert "ran in fp32" in detail


# --------------------------------------------------------------------------- CLI
def test_cli_handler(pkg: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["package", "verify", str(pkg), "--device", "cpu"]) == 0
    out = capsys.readouterr().out
    assert "verdict: OK" in out and "forward" in out
    (pkg / "model_config.yaml").write_text((pkg / "model_config.yaml").read_text() + "\n# edited\n")
    assert main(["package", "verify", str(pkg)]) == 1
    out = capsys.readouterr().out
    assert "FAIL" in out and "model_config.yaml: sha256 mismatch" in out and "verdict: FAILED" in out
    assert main(["package", "verify", str(tmp_path / "nowhere")]) == 1
    assert "package directory not found" in capsys.readouterr().out


# --------------------------------------------------------------------------- issue 11: fallback, numerics parity
def test_a_fallback_threshold_fails_verify_unless_allowed(run: Path) -> None:
    cal = run / "calibration" / "seed_43" / "deployment_config.yaml"
    write_deployment(cal, "fp32", threshold_source="max_f1_fallback")
    strict = package_config()
    strict = strict.model_copy(
        update={"calibration": strict.calibration.model_copy(update={"allow_max_f1_fallback": False})}
    )
    with pytest.raises(PackageError, match="threshold source: .*max_f1_fallback"):
        build(run, strict)  # a run that did not opt in never packages a fallback threshold
    pkg = Path(build(run, package_config()).path)  # package_config opts in (tiny models)
    report = verify_package(pkg)
    assert failed(report) == {"threshold source", "load", "forward"}
    assert "--allow-fallback-threshold" in checks(report)["threshold source"].detail
    allowed = verify_package(pkg, allow_fallback_threshold=True)
    assert allowed.ok and "allowed" in checks(allowed)["threshold source"].detail


def test_numerics_edited_after_calibration_are_refused_by_build_and_verify(run: Path, pkg: Path) -> None:
    cal = run / "calibration" / "seed_43" / "deployment_config.yaml"
    edited = yaml.safe_load(cal.read_text()) | {"tta": "minimal"}
    cal.write_text(yaml.safe_dump(edited))
    with pytest.raises(PackageError, match="tta: 'minimal' in the file, calibrated with 'none'"):
        build(run, package_config())
    shipped = yaml.safe_load((pkg / "deployment_config.yaml").read_text()) | {"tta": "standard"}
    (pkg / "deployment_config.yaml").write_text(yaml.safe_dump(shipped))
    write_sha256sums(pkg)
    report = verify_package(pkg)
    assert "deployment_config.yaml" in failed(report)
    assert "tta: 'standard' in the file, calibrated with 'none'" in checks(report)["deployment_config.yaml"].detail


# --------------------------------------------------------------------------- the raster contract (issue 12)
def test_the_package_records_the_raster_contract_and_verify_parses_it(built: Path, pkg: Path) -> None:
    model = PackagedModelConfig.model_validate(yaml.safe_load((built / "model_config.yaml").read_text()))
    assert model.raster == CONTRACT and model.contract == CONTRACT
    assert (
        "raster: EPSG:3857, 4.77 ±5%, uint8 RGB by colour interpretation"
        in checks(verify_package(built))["model_config.yaml"].detail
    )
    doc = yaml.safe_load((pkg / "model_config.yaml").read_text())
    doc["raster"]["pixel_size"] = -4.77
    (pkg / "model_config.yaml").write_text(yaml.safe_dump(doc))
    write_sha256sums(pkg)
    report = verify_package(pkg)
    assert "model_config.yaml" in failed(report)
    assert "raster.pixel_size" in checks(report)["model_config.yaml"].detail


def test_a_package_without_a_contract_loads_as_epsg3857_with_a_warning(
    pkg: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """Packages built before the contract was recorded: their rasters were EPSG:3857 (ingestion required it)."""
    import logging

    from rtscore.inference.predict import load_package

    doc = yaml.safe_load((pkg / "model_config.yaml").read_text())
    del doc["raster"]
    (pkg / "model_config.yaml").write_text(yaml.safe_dump(doc))
    write_sha256sums(pkg)
    report = verify_package(pkg)
    assert report.ok and "raster not recorded (older package)" in checks(report)["model_config.yaml"].detail
    with caplog.at_level(logging.WARNING, logger="rtscore.inference.predict"):
        loaded = load_package(pkg, device="cpu")
    assert loaded.contract == RasterContract(crs="EPSG:3857")
    assert "records no raster contract" in caplog.text


def test_the_package_stage_takes_the_contract_from_the_train_store(run: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The package stage reads `raster_contract` from the train store's attributes (StoreAttrs.contract)."""
    import importlib

    stage = importlib.import_module("rtscore.stages.package")  # the package name is shadowed by the stage function

    recorded = CONTRACT.model_copy(update={"pixel_size": 9.54})
    attrs_seen: list[Path] = []

    def attrs(path: Path) -> StoreAttrs:
        attrs_seen.append(path)
        return StoreAttrs.model_validate(store_attrs_doc(raster_contract=recorded.model_dump(mode="json")))

    built: dict[str, Any] = {}
    monkeypatch.setattr(stage, "require_inputs", lambda *a, **k: None)
    monkeypatch.setattr(stage, "read_store_attrs", attrs)
    monkeypatch.setattr(stage, "record", lambda *a, **k: None)
    monkeypatch.setattr(stage, "build_package", lambda out, cfg, **kw: built.update(kw))
    summary = type("S", (), {"shipped_seed": 43, "seeds": [type("P", (), {"seed": 43})()]})()
    monkeypatch.setattr(stage, "read_calibration_summary", lambda _run: summary)
    stage.package(str(run), package_config())
    assert attrs_seen == [run / "datasets" / "train.zarr"] and built["contract"] == recorded


# --------------------------------------------------------------------------- issue 21: load = verify
def test_a_key_given_twice_in_model_config_fails_verify_and_the_load(
    pkg: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Plain YAML keeps the last of two `tile_size` keys (the package would run at 128 px): model_config.yaml is read
    as every config file is, and a key given twice is refused by verify and by the audit every load goes through."""
    (pkg / "model_config.yaml").write_text((pkg / "model_config.yaml").read_text() + "tile_size: 128\n")
    write_sha256sums(pkg)  # a consistent package: only the YAML reader can catch it
    report = verify_package(pkg)
    assert failed(report) == {"model_config.yaml", "channel binding", "load", "forward"}
    assert "key 'tile_size' is given twice" in checks(report)["model_config.yaml"].detail
    assert main(["package", "verify", str(pkg)]) == 1
    assert "given twice" in capsys.readouterr().out
    from rtscore.package import audited_package

    with pytest.raises(PackageError, match=r"model_config.yaml check: .*key 'tile_size' is given twice"):
        audited_package(pkg)


def test_the_load_audit_runs_once_per_package_until_a_file_changes(pkg: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """audited_package is memoised by the package's path and a stat of its files (size, mtime, ctime, inode): a
    campaign loading the package once per chunk reads it once; a file rewritten, even with its mtime set back, is
    audited again."""
    from rtscore.package import audited_package
    from tests.helpers import count_audits, flip_byte

    audits = count_audits(monkeypatch)
    first = audited_package(pkg)
    assert audited_package(pkg).deployment is first.deployment  # the parsed files of the one audit
    assert audited_package(pkg.parent / "." / pkg.name).model_config is first.model_config  # by its real path
    assert len(audits) == 1
    (pkg / "requirements_frozen.txt").write_bytes((pkg / "requirements_frozen.txt").read_bytes())  # same bytes
    audited_package(pkg)
    assert len(audits) == 2
    flip_byte(pkg / "weights.pth", keep_mtime=True)  # same size and mtime: the ctime tells
    with pytest.raises(PackageError, match=r"SHA256SUMS check: SHA256SUMS: weights.pth: sha256 mismatch"):
        audited_package(pkg)
    with pytest.raises(PackageError, match="weights.pth"):  # a refusal is remembered too, and raised again
        audited_package(pkg)
    assert len(audits) == 3


def test_the_package_records_the_smallest_object_rts_map_writes(run: Path, pkg: Path) -> None:
    """Issue 23 (4): `rts map` applies the run's package.min_object_area_m2 (issue 35: its own key, not the opt-in
    evaluation filter metrics.min_object_area_m2); a package built before maps at the default, and verify says so."""
    from rtscore.inference.predict import load_package

    cfg = package_config()
    cfg.metrics.min_object_area_m2 = 1.0  # evaluation's filter: not what the package records
    cfg.package.min_object_area_m2 = 90_000.0
    built = Path(build(run, cfg).path)
    model = PackagedModelConfig.model_validate(yaml.safe_load((built / "model_config.yaml").read_text()))
    assert model.min_object_area_m2 == 90_000.0
    assert "min object area 90000 m²" in checks(verify_package(built))["model_config.yaml"].detail
    assert load_package(built, device="cpu").min_object_area_m2 == 90_000.0
    doc = yaml.safe_load((pkg / "model_config.yaml").read_text())
    assert doc["min_object_area_m2"] == 350.0  # the default config's
    del doc["min_object_area_m2"]
    (pkg / "model_config.yaml").write_text(yaml.safe_dump(doc))
    write_sha256sums(pkg)
    report = verify_package(pkg)
    assert report.ok
    assert "min object area not recorded (older package), mapped at the default 350 m²" in (
        checks(report)["model_config.yaml"].detail
    )
    assert load_package(pkg, device="cpu").min_object_area_m2 == 350.0
