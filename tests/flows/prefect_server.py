"""A real Prefect server for the tests of the production path: `prefect server start` in a subprocess with its
own PREFECT_HOME, the README's process pools (`cpu-process`, and `gpu` standing in for the GPU pool),
`prefect deploy --all` from prefect.yaml, and workers started as the README does.

The server tests share one such server per test process (tests/flows/conftest.py: ``prefect_server``, with the
zombie automation of the README's server set-up): starting it and deploying costs ~20 s, once instead of once per
module. Each module borrows it (:func:`borrow`) with its own workers and environment; on return its workers are
stopped and any flow run not final is cancelled, so nothing a module left behind can reach the next module's
workers (the pools and deployments are the same for all)."""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from uuid import UUID

ROOT = Path(__file__).resolve().parents[2]
PREFECT = str(Path(sys.executable).parent / "prefect")
RUN_TIMEOUT_S = 900  # a limit, not the expected time: a flow run's process takes long to start on a loaded machine
ZOMBIE_AFTER_S = 60  # the zombie automation's `within`: 2 heartbeat periods (prefect.yaml: HEARTBEAT_FREQUENCY=30)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@dataclass
class Server:
    """A Prefect server with pools `cpu-process` and `gpu` (both process pools), deployments and workers."""

    url: str
    env: dict[str, str]
    logs: Path
    procs: list[subprocess.Popen[bytes]] = field(default_factory=list)
    server_log: Path | None = None  # the shared server's own log, where its logs are not under ``logs``

    @contextlib.contextmanager
    def client(self) -> Iterator[Any]:
        """A sync client of this server (not of the session's in-process test harness)."""
        from prefect.client.orchestration import get_client
        from prefect.settings import PREFECT_API_URL, temporary_settings

        with temporary_settings(updates={PREFECT_API_URL: self.url}), get_client(sync_client=True) as client:
            yield client

    def log_tail(self, n: int = 60) -> str:
        out = []
        shared = [self.server_log] if self.server_log is not None else []
        for log in [*shared, *sorted(self.logs.glob("*.log"))]:
            lines = log.read_text(errors="replace").splitlines()[-n:]
            out.append(f"----- {log.name} (last {len(lines)} lines)\n" + "\n".join(lines))
        return "\n".join(out)

    def start(self, name: str, *args: str) -> subprocess.Popen[bytes]:
        """``prefect *args`` in a session of its own, SIGINT at its default (see :func:`default_sigint`)."""
        log = (self.logs / f"{name}.log").open("ab")
        proc = subprocess.Popen(
            [PREFECT, *args],
            env=self.env,
            cwd=ROOT,
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
            preexec_fn=default_sigint,
        )
        self.procs.append(proc)
        return proc

    def cli(self, *args: str) -> str:
        done = subprocess.run([PREFECT, *args], env=self.env, cwd=ROOT, capture_output=True, text=True, timeout=180)
        assert done.returncode == 0, f"prefect {' '.join(args)} failed:\n{done.stdout}\n{done.stderr}"
        return done.stdout

    def stop(self) -> None:
        """Stop what this fixture started: each process group, and the flow-run processes of a worker (they run
        in sessions of their own: a worker's SIGTERM leaves them running)."""
        import psutil

        # Only the processes still running: the pid (and group id) of one that ended (kill_machine) may be
        # another process's by now.
        running = [proc for proc in self.procs if proc.poll() is None]
        children: list[psutil.Process] = []
        for proc in running:
            with contextlib.suppress(psutil.NoSuchProcess):
                children += psutil.Process(proc.pid).children(recursive=True)
        for proc in reversed(running):
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGTERM)
        for proc in reversed(running):
            try:
                proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(proc.pid, signal.SIGKILL)
                proc.wait(timeout=10)
        for child in children:
            with contextlib.suppress(psutil.NoSuchProcess):
                child.kill()
        psutil.wait_procs(children, timeout=10)
        self.procs.clear()


def default_sigint() -> None:
    """SIGINT back to its default in a process about to run a Prefect worker (or server).

    A process started in the background of a non-interactive shell (``prefect worker start ... &`` in a script,
    a CI job, a test run started that way) inherits SIGINT *ignored*. A Prefect worker stops on SIGTERM by sending
    itself SIGINT, so such a worker never stops on SIGTERM: it logs "Sending SIGINT to the process worker" and runs
    on (docs/cloud.md, "Stopping workers")."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def wait_healthy(server: Server, proc: subprocess.Popen[bytes], timeout: float = 180) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise AssertionError(f"prefect server exited with {proc.returncode}:\n{server.log_tail()}")
        with contextlib.suppress(OSError), urllib.request.urlopen(f"{server.url}/health", timeout=2) as r:
            if r.status == 200:
                return
        time.sleep(0.5)
    raise AssertionError(f"prefect server not healthy after {timeout} s:\n{server.log_tail()}")


def server_env(home: str, url: str, **env_extra: str) -> dict[str, str]:
    """The environment of a server (its PREFECT_HOME and API URL) and of everything started against it: this
    process's environment as it is now, without its PREFECT_ settings, plus the server's settings."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("PREFECT_")}
    # torch's OpenMP threads wait for each other by spinning: on two cores shared by the test process, the server
    # and two or three flow-run processes, a spinning thread holds the core its partner needs, and a training step
    # of these tiny models takes seconds instead of a fraction of one. Waiting passively changes nothing computed
    # (the work is split among the same threads the same way), only who gets the core meanwhile.
    env.setdefault("OMP_WAIT_POLICY", "PASSIVE")
    env.update(
        PREFECT_HOME=home,
        PREFECT_API_URL=url,
        PREFECT_SERVER_ANALYTICS_ENABLED="false",
        # No scheduled runs of final-multiseed while the test runs (its cron is weekly anyway).
        PREFECT_SERVER_SERVICES_SCHEDULER_ENABLED="false",
        PREFECT_WORKER_QUERY_SECONDS="1",  # pick up runs within a second (default 10)
        PREFECT_LOGGING_LEVEL="INFO",
        RTS_PROJECT_DIR=str(ROOT),  # the pull step's working directory (prefect.yaml)
        **env_extra,
    )
    return env


def start_server(base: Path, *, zombie_automation: bool = False, **env_extra: str) -> Server:
    """`prefect server start` under ``base``, pools `cpu-process` and `gpu`, `prefect deploy --all` (no workers:
    the caller starts them with :meth:`Server.start`), and with ``zombie_automation`` the zombie automation of the
    README's server set-up (deployments/zombie_automation.py, ``--within`` :data:`ZOMBIE_AFTER_S`): a run whose
    heartbeats stop is marked Crashed. Stop it with :meth:`Server.stop`."""
    (base / "logs").mkdir(parents=True, exist_ok=True)
    port = free_port()
    env = server_env(str(base / "home"), f"http://127.0.0.1:{port}/api", **env_extra)
    srv = Server(url=env["PREFECT_API_URL"], env=env, logs=base / "logs")
    try:
        proc = srv.start("server", "server", "start", "--host", "127.0.0.1", "--port", str(port))
        wait_healthy(srv, proc)
        srv.cli("work-pool", "create", "cpu-process", "--type", "process")
        srv.cli("work-pool", "create", "gpu", "--type", "process")  # stands in for the GPU pool
        srv.cli("--no-prompt", "deploy", "--all")
        if zombie_automation:
            done = subprocess.run(
                [sys.executable, "deployments/zombie_automation.py", "--within", str(ZOMBIE_AFTER_S)],
                env=srv.env,
                cwd=ROOT,
                capture_output=True,
                text=True,
                timeout=120,
            )
            assert done.returncode == 0, done.stdout + done.stderr
    except BaseException:
        srv.stop()
        raise
    return srv


@contextlib.contextmanager
def borrow(shared: Server, logs: Path, **env_extra: str) -> Iterator[Server]:
    """The shared server for one module: its workers (started with :meth:`Server.start`) log under ``logs`` and
    get this process's environment as it is now plus ``env_extra`` (as a server of the module's own would give
    them). On exit they are stopped, and every flow run not final is cancelled: a run the module left behind (a
    test that failed half-way) can never be picked up by the next module's workers."""
    logs.mkdir(parents=True, exist_ok=True)
    env = server_env(shared.env["PREFECT_HOME"], shared.url, **env_extra)
    srv = Server(url=shared.url, env=env, logs=logs, server_log=shared.logs / "server.log")
    try:
        yield srv
    finally:
        srv.stop()
        cancel_unfinished(srv)


def cancel_unfinished(srv: Server) -> None:
    """Cancel every flow run of the server that is not final (Scheduled, Pending, Running, Paused...)."""
    from prefect.client.schemas.filters import FlowRunFilter, FlowRunFilterState, FlowRunFilterStateType
    from prefect.client.schemas.objects import StateType
    from prefect.states import Cancelled

    final = [StateType.COMPLETED, StateType.FAILED, StateType.CANCELLED, StateType.CRASHED]
    with srv.client() as client:
        unfinished = client.read_flow_runs(
            flow_run_filter=FlowRunFilter(state=FlowRunFilterState(type=FlowRunFilterStateType(not_any_=final)))
        )
        for run in unfinished:
            client.set_flow_run_state(run.id, Cancelled(message="left behind by a test module"), force=True)


def wait_final(srv: Server, flow_run_id: UUID, timeout: float = RUN_TIMEOUT_S) -> Any:
    deadline = time.monotonic() + timeout
    with srv.client() as client:
        while time.monotonic() < deadline:
            run = client.read_flow_run(flow_run_id)
            if run.state is not None and run.state.is_final():
                return run
            time.sleep(1.0)
    raise AssertionError(f"flow run {flow_run_id} not finished after {timeout} s:\n{srv.log_tail()}")


def all_flow_runs(client: Any) -> list[Any]:
    """Every flow run of the server, page by page (the API hands out at most 200 at a time; the session's server
    holds the runs of every module that used it)."""
    runs: list[Any] = []
    while page := client.read_flow_runs(limit=200, offset=len(runs)):
        runs += page
    return runs


def tree(client: Any, root: UUID) -> list[Any]:
    """The flow run and all its subflow runs (local subflows and run_deployment children alike)."""
    from prefect.client.schemas.filters import FlowRunFilter, FlowRunFilterParentFlowRunId

    runs = [client.read_flow_run(root)]
    frontier = [root]
    while frontier:
        children = client.read_flow_runs(
            flow_run_filter=FlowRunFilter(parent_flow_run_id=FlowRunFilterParentFlowRunId(any_=frontier))
        )
        children = [c for c in children if c.id not in {r.id for r in runs}]
        runs += children
        frontier = [c.id for c in children]
    return runs


def kill_machine(proc: subprocess.Popen[bytes]) -> None:
    """SIGKILL a worker and every process it started (its flow-run processes run in sessions of their own), all
    at once: the VM is gone, and nothing is left to report the flow run's end."""
    import psutil

    worker = psutil.Process(proc.pid)
    doomed = [worker, *worker.children(recursive=True)]
    for p in doomed:
        with contextlib.suppress(psutil.NoSuchProcess):
            p.send_signal(signal.SIGKILL)
    psutil.wait_procs(doomed, timeout=30)
    proc.wait(timeout=30)
