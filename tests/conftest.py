"""Shared fixtures: tiny tiles and configs built in code, an isolated Prefect home."""

from __future__ import annotations

import os
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest

# Isolate Prefect before anything imports it (results, SQLite database, settings).
_PREFECT_HOME = tempfile.mkdtemp(prefix="rts-prefect-home-")
os.environ.setdefault("PREFECT_HOME", _PREFECT_HOME)
os.environ.setdefault("PREFECT_SERVER_ANALYTICS_ENABLED", "false")
os.environ.setdefault("PREFECT_LOGGING_LEVEL", "WARNING")
# torch's OpenMP threads (GNU OpenMP, 2 per process here) wait for work by spinning. `make test` runs two test
# processes on two cores, each with its own 2 threads, and more beside them (DDP ranks, CLI commands, flow runs): a
# spinning thread holds the core another process's thread needs, and a tiny model's step takes several times as long.
# A passive wait changes nothing computed (the same threads split the same work the same way), only who gets the core
# meanwhile; set before anything loads torch, so this process and every process it starts read it (the server
# tests' flow runs already had it: tests/flows/prefect_server.server_env). A value set by the caller is kept.
os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")

from rtscore.config.generation import GenerationConfig  # noqa: E402
from rtscore.data.tiles import RawTile, nominal_pixel_area_m2  # noqa: E402


def make_tile(
    i: int,
    size: int = 32,
    *,
    positive: bool = True,
    extra: int = 0,
    nodata_rows: int = 0,
    region: str = "r0",
    seed: int = 0,
) -> RawTile:
    """A small deterministic tile: a labelled square on a noisy background."""
    rng = np.random.default_rng([seed, i])
    rgb = rng.integers(20, 230, (3, size, size), dtype=np.uint8)
    label = np.zeros((size, size), np.uint8)
    if positive:
        label[size // 4 : size // 2, size // 4 : size // 2] = 1
    alpha = np.full((size, size), 255, np.uint8)
    ex = rng.normal(0, 1, (extra, size, size)).astype(np.float32) if extra else None
    if nodata_rows:  # NoData as a store holds it: RGB 0, EXTRA 0, label 255
        alpha[:nodata_rows] = 0
        rgb[:, :nodata_rows] = 0
        label[:nodata_rows] = 255
        if ex is not None:
            ex[:, :nodata_rows] = 0
    return RawTile(
        tile_id=f"t{i:04d}",
        region=region,
        rgb=rgb,
        alpha=alpha,
        label_exact=label,
        label_noisy=label.copy(),
        extra=ex,
        n_objects=int(positive),
        source_index=i,
        pixel_area_m2=nominal_pixel_area_m2(),
    )


@pytest.fixture
def gen_config() -> GenerationConfig:
    return GenerationConfig(
        split="train",
        tile_size=64,
        seed=7,
        synthetic={
            "n_positive": 6,
            "n_negative": 5,
            "n_full_nodata": 1,
            "regions": ["alpha tundra", "beta tundra"],
            "extra_channels": ["ndvi"],
            "generation_batch_size": 3,
        },
        store={"shard_tiles": 4},
    )


@pytest.fixture
def tmp_cwd(tmp_path: Path) -> Iterator[Path]:
    old = Path.cwd()
    os.chdir(tmp_path)
    try:
        yield tmp_path
    finally:
        os.chdir(old)


GCS_TEST_BUCKET = "rts-test"


@pytest.fixture(scope="session")
def gcs_emulator() -> Iterator[str]:
    """An in-process GCS emulator (in memory, bucket ``rts-test``) for the session; ``STORAGE_EMULATOR_HOST``
    points at it while it runs. Yields the emulator's URL."""
    import socket

    from gcp_storage_emulator.server import create_server

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    server = create_server("127.0.0.1", port, in_memory=True, default_bucket=GCS_TEST_BUCKET)
    server.start()
    url = f"http://127.0.0.1:{port}"
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("STORAGE_EMULATOR_HOST", url)
        try:
            yield url
        finally:
            server.stop()


@pytest.fixture(scope="session")
def prefect_harness() -> Iterator[None]:
    """One ephemeral Prefect server for the few flow tests (start-up takes ~20 s on 2 cores)."""
    from prefect.testing.utilities import prefect_test_harness

    with prefect_test_harness(server_startup_timeout=120):
        yield


@pytest.fixture
def hash_calls(monkeypatch: pytest.MonkeyPatch) -> list[Path]:
    """Every file whose content is hashed (sha256_file is what every fingerprint reads through)."""
    import rtscore.storage.files as files

    calls: list[Path] = []
    real = files.sha256_file

    def counting(path: Path, chunk: int = 1 << 20) -> str:
        calls.append(path)
        return real(path, chunk)

    monkeypatch.setattr(files, "sha256_file", counting)
    return calls


@pytest.fixture
def network_calls(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """Every name looked up, network connection attempted and hub download asked for, each refused at once (so a
    test of an offline failure never waits on the network): what "fails fast" means, counted instead of timed."""
    import socket

    import huggingface_hub

    calls: list[str] = []

    def getaddrinfo(host: object, port: object, *args: object, **kwargs: object) -> list[Any]:
        calls.append(f"getaddrinfo {host!r}")
        raise socket.gaierror(socket.EAI_NONAME, f"test: no name lookup ({host!r})")

    def connect(sock: socket.socket, address: object) -> None:
        calls.append(f"connect {address!r}")
        raise ConnectionRefusedError(f"test: no network ({address!r})")

    def hf_hub_download(repo_id: str, *args: object, **kwargs: object) -> str:
        calls.append(f"hf_hub_download {repo_id}")
        raise ConnectionError(f"test: no download of {repo_id}")

    monkeypatch.setattr(socket, "getaddrinfo", getaddrinfo)
    monkeypatch.setattr(socket.socket, "connect", connect)
    monkeypatch.setattr(huggingface_hub, "hf_hub_download", hf_hub_download)
    return calls
