"""Fixtures of the flow tests."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.flows.prefect_server import Server, start_server


@pytest.fixture(scope="session")
def prefect_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    """One real Prefect server for the server tests of this test process, set up as the README's server is:
    pools `cpu-process` and `gpu`, `prefect deploy --all`, the zombie automation. Starting and deploying takes
    ~20 s on two cores: once per process, not once per module. A module borrows it with its own workers
    (tests.flows.prefect_server.borrow), which leaves no flow run behind for the next one."""
    srv = start_server(tmp_path_factory.mktemp("prefect-server"), zombie_automation=True)
    try:
        yield srv
    finally:
        srv.stop()
