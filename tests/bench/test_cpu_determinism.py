"""bench/cpu_determinism.py (issue 25): the CPU dispatch settings a run is compared under."""

from __future__ import annotations

import pytest

from bench.cpu_determinism import PINNED, SETTINGS, clean_env, cpu_info, probe_isa


def test_clean_env_drops_inherited_dispatch_settings_and_applies_the_settings_own() -> None:
    import os

    os.environ["ONEDNN_MAX_CPU_ISA"] = "SSE41"
    try:
        env = clean_env({"ATEN_CPU_CAPABILITY": "avx2"})
    finally:
        del os.environ["ONEDNN_MAX_CPU_ISA"]
    assert "ONEDNN_MAX_CPU_ISA" not in env and env["ATEN_CPU_CAPABILITY"] == "avx2"
    assert "PATH" in env


def test_settings_repeat_native_and_pinned_so_both_determinism_checks_have_a_pair() -> None:
    envs = [env for _, env in SETTINGS]
    assert envs.count({}) == 2 and envs.count(PINNED) == 2
    assert set(PINNED) == {"ATEN_CPU_CAPABILITY", "ONEDNN_MAX_CPU_ISA", "MKL_CBWR"}


def test_probe_reports_the_capped_code_paths() -> None:
    got = probe_isa(clean_env({"ATEN_CPU_CAPABILITY": "default", "ONEDNN_MAX_CPU_ISA": "SSE41"}))
    assert got["aten"] == "DEFAULT"
    assert "SSE4.1" in got["onednn_isa"] or "SSE41" in got["onednn_isa"].replace(".", "")


def test_cpu_info_names_the_model_and_vector_flags() -> None:
    info = cpu_info()
    if info["model_name"].startswith("unknown"):
        pytest.skip("no lscpu here")
    assert info["vector_flags"] and all(not f.startswith("fpu") for f in info["vector_flags"])
