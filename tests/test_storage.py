from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from rtscore.storage import RunDir, StorageError, atomic_write_text, fingerprint, staged_dir
from tests.helpers import flip_byte


def test_record_and_verify_file_and_tree(tmp_path: Path) -> None:
    run = RunDir(tmp_path / "run")
    atomic_write_text(run.path("a.json"), "{}")
    (run.path("tree/sub")).mkdir(parents=True)
    run.path("tree/sub/x.bin").write_bytes(b"x" * 10)
    run.path("tree/y.bin").write_bytes(b"y")
    ea = run.record("a.json", "stage-a", "cfg1")
    et = run.record("tree", "stage-b", "cfg2")
    assert ea.kind == "file" and ea.bytes == 2 and et.kind == "dir" and et.bytes == 11
    manifest = json.loads(run.manifest_path.read_text())
    assert set(manifest["artifacts"]) == {"a.json", "tree"}
    assert manifest["artifacts"]["tree"]["stage"] == "stage-b"
    run.verify("tree")
    run.path("tree/y.bin").write_bytes(b"z")
    with pytest.raises(StorageError, match="does not match the manifest"):
        run.verify("tree")


def test_tree_fingerprint_depends_on_names_and_content(tmp_path: Path) -> None:
    a, b = tmp_path / "a", tmp_path / "b"
    for d in (a, b):
        d.mkdir()
    (a / "1").write_bytes(b"q")
    (b / "2").write_bytes(b"q")
    assert fingerprint(a)[0] != fingerprint(b)[0]


def test_require_names_missing_input(tmp_path: Path) -> None:
    with pytest.raises(StorageError, match=r"input artifact .*datasets/train.zarr is missing"):
        RunDir(tmp_path).require("datasets/train.zarr")


def test_staged_dir_publishes_only_on_success(tmp_path: Path) -> None:
    final = tmp_path / "out"
    with pytest.raises(RuntimeError), staged_dir(final) as tmp:
        (tmp / "half").write_text("x")
        raise RuntimeError("boom")
    assert not final.exists() and list(tmp_path.iterdir()) == []
    with staged_dir(final) as tmp:
        (tmp / "done").write_text("x")
    assert (final / "done").exists()
    with staged_dir(final) as tmp:  # replaces the old version whole
        (tmp / "v2").write_text("x")
    assert sorted(p.name for p in final.iterdir()) == ["v2"]


def test_forget_removes_stale_record(tmp_path: Path) -> None:
    run = RunDir(tmp_path)
    atomic_write_text(run.path("s.json"), "1")
    run.record("s.json", "s", "c")
    run.forget("s.json")
    assert run.entry("s.json") is None


def test_os_errors_of_writes_name_the_path(tmp_path: Path) -> None:
    """Issue 11.19: a write the file system refuses is a StorageError naming the path, not a traceback."""
    blocker = tmp_path / "a-file"
    blocker.write_text("x")
    with pytest.raises(StorageError, match=rf"cannot write {blocker}/sub/report.json: Not a directory"):
        atomic_write_text(blocker / "sub" / "report.json", "{}")
    with pytest.raises(StorageError, match=rf"cannot write {blocker}/pkg"), staged_dir(blocker / "pkg"):
        pass


def test_check_writable_names_what_blocks(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:

    from rtscore.storage import check_writable

    check_writable(tmp_path / "new" / "run")  # creatable: fine
    blocker = tmp_path / "a-file"
    blocker.write_text("x")
    with pytest.raises(StorageError, match=rf"cannot write {blocker}/run: {blocker} is a file, not a directory"):
        check_writable(blocker / "run")
    read_only = tmp_path / "ro"
    read_only.mkdir()
    real = os.access
    monkeypatch.setattr(os, "access", lambda p, mode: False if Path(p) == read_only else real(p, mode))
    with pytest.raises(StorageError, match=rf"cannot write {read_only}/run/x: {read_only} is not writable"):
        check_writable(read_only / "run" / "x")


def test_verify_hashes_an_unchanged_artifact_once(tmp_path: Path, hash_calls: list[Path]) -> None:
    run = RunDir(tmp_path / "run")
    (run.path("tree/sub")).mkdir(parents=True)
    run.path("tree/sub/x.bin").write_bytes(b"x" * 100)
    run.path("tree/y.bin").write_bytes(b"y" * 100)
    run.record("tree", "stage-b", "cfg2")
    assert len(hash_calls) == 2  # record hashes each file once ...
    hash_calls.clear()
    run.verify("tree")
    run.verify("tree")
    assert hash_calls == []  # ... and the content it just hashed is not hashed again

    run.path("tree/sub/x.bin").unlink()  # a missing record (e.g. written by an older version) hashes once
    run.path("tree/sub/x.bin").write_bytes(b"x" * 100)
    run.verify("tree")
    assert len(hash_calls) == 2
    run.verify("tree")
    assert len(hash_calls) == 2


@pytest.mark.parametrize("keep_mtime", [False, True], ids=["mtime-touched", "mtime-restored"])
def test_verify_catches_an_edit_that_keeps_the_size(tmp_path: Path, keep_mtime: bool) -> None:
    run = RunDir(tmp_path / "run")
    atomic_write_text(run.path("stats.json"), '{"mean": [1, 2, 3]}')
    run.record("stats.json", "stage-a", "cfg1")
    run.verify("stats.json")
    flip_byte(run.path("stats.json"), keep_mtime)  # the change time moves even when the mtime is put back
    with pytest.raises(StorageError, match="does not match the manifest"):
        run.verify("stats.json")


@pytest.mark.parametrize("change", ["truncate", "new-file", "touch-only"])
def test_verify_checks_a_tree_changed_after_a_first_verify(tmp_path: Path, hash_calls: list[Path], change: str) -> None:
    """A file of a verified tree truncated, a file added, or a file merely touched: hashed again before use;
    a real change is refused, a touch costs one hash and is trusted again afterwards."""
    run = RunDir(tmp_path / "run")
    run.path("tree/sub").mkdir(parents=True)
    run.path("tree/sub/x.bin").write_bytes(b"x" * 100)
    run.record("tree", "stage-b", "cfg2")
    run.verify("tree")
    victim = run.path("tree/sub/x.bin")
    if change == "truncate":
        victim.write_bytes(b"x" * 10)
    elif change == "new-file":
        run.path("tree/sub/extra.bin").write_bytes(b"e")
    else:
        st = victim.stat()
        os.utime(victim, ns=(st.st_atime_ns, st.st_mtime_ns + 1_000_000_000))
    hash_calls.clear()
    if change == "touch-only":
        run.verify("tree")
        assert hash_calls
        hash_calls.clear()
        run.verify("tree")
        assert hash_calls == []
    else:
        with pytest.raises(StorageError, match="does not match the manifest"):
            run.verify("tree")
        assert hash_calls
