"""The review flows (prefect.yaml review-export / review-ingest) run the library's export and ingest on a real
(ephemeral) Prefect server, as the deployments do, and publish what they wrote."""

from __future__ import annotations

import re
import signal
import subprocess
import sys
import urllib.request
from pathlib import Path

import pytest

from bench.review_export_bench import write_campaign
from flows.params.review import ReviewExportParams, ReviewIngestParams
from flows.review import review_export, review_ingest
from rtscore.review import run
from rtscore.review.manifest import (
    HEADER_FILE,
    MANIFEST_FILE,
    PAGE_FILE,
    ChipSettings,
    Selection,
    iter_objects,
    read_header,
)
from tests.flows.prefect_server import default_sigint
from tests.review import test_ingest
from tests.review.test_ingest import MAIN, verdict_doc, write_verdicts

world = test_ingest.world  # the ingest tests' scenes, round 1, campaign and review


def test_review_export_flow_writes_the_review_and_its_page(prefect_harness: None, tmp_path: Path) -> None:
    campaign, package = write_campaign(tmp_path / "campaign", 8, 1, 256)
    out = tmp_path / "review"
    params = ReviewExportParams(
        campaign=str(campaign), package=str(package), output=str(out), select="stratified", n=5, seed=3
    )
    header = review_export(params)
    assert header == read_header(out / HEADER_FILE) and header.n_objects == 5
    assert len(list(iter_objects(out / MANIFEST_FILE))) == 5
    assert (out / PAGE_FILE).is_file() and (out / "label-studio" / "tasks.json").is_file()
    assert review_export(params) == header  # a re-run resumes: the same review


def test_review_ingest_flow_cuts_the_next_data_root(prefect_harness: None, world: Path, tmp_path: Path) -> None:
    verdicts = write_verdicts(tmp_path / "verdicts.geojson", verdict_doc(world, MAIN))
    params = ReviewIngestParams(
        review=str(world / "review"),
        verdicts=verdicts,
        tiling_config=str(world / "tile.yaml"),
        output=str(tmp_path / "tiles-r1"),
        held_out="skip",
    )
    result = review_ingest(params)
    c = result.counts
    assert (c.confirmed, c.false_positives, c.unsure, c.left_out_held_out) == (1, 1, 1, 1)
    assert (tmp_path / "tiles-r1" / "review" / "ingest.json").is_file() and result.version == "tiles+r1"


def ignore_sigint() -> None:
    """SIGINT ignored in a process about to exec, as a background job of a non-interactive shell starts
    (``rts review serve review/ &`` in a script, a CI job, a test run started that way)."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)


@pytest.fixture(scope="module")
def served_review(tmp_path_factory: pytest.TempPathFactory) -> Path:
    tmp = tmp_path_factory.mktemp("serve")
    campaign, package = write_campaign(tmp / "campaign", 3, 1, 256)
    run.export(str(campaign), str(package), str(tmp / "review"), Selection(), ChipSettings())
    return tmp / "review"


def test_the_wrapper_starts_a_process_with_sigint_ignored() -> None:
    """The premise of the next test's ignored case: the exec'd interpreter starts with SIGINT ignored (Python then
    installs no KeyboardInterrupt handler), and with it at its default under :func:`default_sigint`."""
    code = (
        "import signal; h = signal.getsignal(signal.SIGINT); "
        "print({signal.SIG_IGN: 'ignored', signal.default_int_handler: 'KeyboardInterrupt'}.get(h, repr(h)))"
    )
    for preexec, seen in ((ignore_sigint, "ignored"), (default_sigint, "KeyboardInterrupt")):
        done = subprocess.run(
            [sys.executable, "-c", code], capture_output=True, text=True, preexec_fn=preexec, timeout=60, check=True
        )
        assert done.stdout.strip() == seen


@pytest.mark.parametrize("started", ["sigint-default", "sigint-ignored"])
@pytest.mark.parametrize("stop", [signal.SIGINT, signal.SIGTERM], ids=["SIGINT", "SIGTERM"])
def test_rts_review_serve_serves_the_page_until_ctrl_c_or_sigterm(
    served_review: Path, started: str, stop: signal.Signals
) -> None:
    """`rts review serve` stops cleanly (exit status 0) on SIGINT and on SIGTERM, also when started with SIGINT
    ignored (the server installs both handlers itself: rtscore/review/serve.py)."""
    cmd = [sys.executable, "-m", "flows.cli.main", "review", "serve", str(served_review), "--port", "0"]
    proc = subprocess.Popen(
        cmd,
        stdout=subprocess.PIPE,
        text=True,
        cwd=Path(__file__).resolve().parents[2],
        start_new_session=True,  # a Ctrl-C at the terminal running the tests does not reach it
        preexec_fn=ignore_sigint if started == "sigint-ignored" else default_sigint,
    )
    try:
        assert proc.stdout is not None
        line = proc.stdout.readline()
        url = re.search(r"at (http://127\.0\.0\.1:\d+/index\.html) ", line)
        assert url, line
        with urllib.request.urlopen(url[1], timeout=10) as r:
            assert r.status == 200 and r.headers["Content-Type"] == "text/html"
    finally:
        proc.send_signal(stop)
        try:
            assert proc.wait(timeout=20) == 0
        finally:
            proc.kill()  # a no-op once it has stopped
            proc.wait()
