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


# --------------------------------------------------------------------------- adopting another run's artifact
def make_tree(root: Path) -> None:
    """A Zarr-like tree: metadata at two levels, nested chunks, names whose path order differs from their
    string order (``a-c`` sorts before ``a/b`` as a string)."""
    (root / "images" / "c").mkdir(parents=True)
    (root / "zarr.json").write_text('{"zarr_format": 3}')
    (root / "images" / "zarr.json").write_text('{"shape": [4]}')
    for i in range(4):
        (root / "images" / "c" / str(i)).write_bytes(bytes([i]) * (50 + i))
    (root / "images-c").write_bytes(b"q")


@pytest.fixture
def variants(tmp_path: Path) -> tuple[RunDir, RunDir]:
    """A variant that ran the data stages (a file and a tree recorded) and one that will adopt them."""
    a, b = RunDir(tmp_path / "sweep" / "baseline"), RunDir(tmp_path / "sweep" / "loss-ignore")
    atomic_write_text(a.path("normalization_stats.json"), '{"mean": [1, 2, 3]}')
    a.record("normalization_stats.json", "normalization-stats", "cfg-n", code_hash="code-n")
    make_tree(a.path("datasets/train.zarr"))
    a.record("datasets/train.zarr", "generate-dataset", "cfg-d", code_hash="code-d")
    return a, b


IDENTITY = ("path", "kind", "sha256", "bytes", "stage", "config_hash", "code_hash")


def same_identity(x: object, y: object) -> bool:
    return all(getattr(x, f) == getattr(y, f) for f in IDENTITY)


@pytest.mark.parametrize("rel", ["normalization_stats.json", "datasets/train.zarr"])
def test_adopt_links_the_verified_files_and_copies_the_record(
    variants: tuple[RunDir, RunDir], rel: str, hash_calls: list[Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    import rtscore.storage.rundir as rundir

    a, b = variants
    hash_calls.clear()

    def no_hash(*args: object, **kwargs: object) -> None:
        raise AssertionError("a local adopt must not hash the artifact")

    monkeypatch.setattr(rundir, "fingerprint", no_hash)
    monkeypatch.setattr(rundir, "tree_digests", no_hash)
    entry = b.adopt(rel, a)
    source = a.entry(rel)
    assert source is not None and same_identity(entry, source)
    assert entry.uri == b.uri_of(rel) and entry.adopted_from == a.uri_of(rel) and source.adopted_from is None
    assert b.read_manifest().artifacts[rel] == entry  # what adopt returned is what the manifest holds
    assert json.loads(b.manifest_path.read_text())["artifacts"][rel]["adopted_from"] == a.uri_of(rel)
    assert "adopted_from" not in json.loads(a.manifest_path.read_text())["artifacts"][rel]  # old records unchanged

    files = sorted(p.relative_to(a.path(rel)) for p in a.path(rel).rglob("*") if p.is_file()) or [Path()]
    for name in files:  # hard links: the same inodes, nothing copied
        assert (a.path(rel) / name).stat().st_ino == (b.path(rel) / name).stat().st_ino
    assert not [p for p in b.path(rel).parent.iterdir() if ".adopt-" in p.name or ".tmp-" in p.name]  # no staging
    b.verify(rel)  # the adopted copy is verified from the record adopt wrote ...
    a.verify(rel)  # ... and the source's, although the links moved its change times
    c = RunDir(a.root.parent / "aux-slope")
    c.adopt(rel, a)  # a third variant: still nothing hashed
    c.verify(rel)
    assert hash_calls == []
    monkeypatch.undo()
    assert fingerprint(b.path(rel)) == (source.sha256, source.bytes)


def test_adopted_copies_stay_verified_when_other_variants_link_the_same_files(
    variants: tuple[RunDir, RunDir], hash_calls: list[Path]
) -> None:
    """Each link moves the change time of the shared files, in every variant: a variant's copy is then
    recognised as links to the source's verified files, not hashed; a real change is still caught."""
    a, b = variants
    rel = "datasets/train.zarr"
    b.adopt(rel, a)
    b.verify(rel)
    others = [RunDir(a.root.parent / f"v{i}") for i in range(3)]
    for run in others:
        run.adopt(rel, a)  # every adoption moves the ctime of b's files too
    before = b.manifest_path.read_text()
    hash_calls.clear()
    for run in (b, *others, a):
        run.verify(rel)
    assert b.adopt(rel, a).created == b.entry(rel).created and b.manifest_path.read_text() == before  # a no-op
    assert hash_calls == []

    flip_byte(b.path(rel) / "images" / "c" / "1", keep_mtime=True)  # one inode, every variant's file
    for run in (b, others[0], a):
        with pytest.raises(StorageError, match="does not match the manifest"):
            run.verify(rel)


def test_adopt_again_is_a_no_op_and_a_different_record_is_replaced(variants: tuple[RunDir, RunDir]) -> None:
    a, b = variants
    rel = "datasets/train.zarr"
    first = b.adopt(rel, a)
    before = b.manifest_path.read_text()
    assert b.adopt(rel, a) == first and b.manifest_path.read_text() == before  # idempotent: nothing rewritten

    # b computed its own, different store before: adopting replaces files and record together
    c = RunDir(a.root.parent / "other")
    c.path(rel).mkdir(parents=True)
    (c.path(rel) / "stale.bin").write_bytes(b"old")
    old = c.record(rel, "generate-dataset", "cfg-old", code_hash="code-old")
    entry = c.adopt(rel, a)
    assert entry.sha256 != old.sha256 and same_identity(entry, a.entry(rel))
    assert not (c.path(rel) / "stale.bin").exists() and fingerprint(c.path(rel))[0] == entry.sha256

    # the recorded files damaged since: adopting again re-links them rather than keeping a wrong copy
    (b.path(rel) / "images" / "c" / "0").unlink()
    again = b.adopt(rel, a)
    assert same_identity(again, first) and fingerprint(b.path(rel)) == (first.sha256, first.bytes)


def test_adopt_refuses_a_missing_record_a_damaged_source_and_bad_paths(variants: tuple[RunDir, RunDir]) -> None:
    a, b = variants
    with pytest.raises(StorageError, match=rf"cannot adopt validation from run {a.uri}: its manifest records no"):
        b.adopt("validation", a)
    a.path("validation").mkdir()  # present but unrecorded: still refused
    with pytest.raises(StorageError, match="records no artifact validation"):
        b.adopt("validation", a)

    flip_byte(a.path("datasets/train.zarr/images/c/2"), keep_mtime=True)
    with pytest.raises(StorageError, match="does not match the manifest"):
        b.adopt("datasets/train.zarr", a)
    assert b.entry("datasets/train.zarr") is None and not b.path("datasets/train.zarr").exists()

    with pytest.raises(StorageError, match="into itself"):
        a.adopt("normalization_stats.json", RunDir(a.root))
    for bad in ("../baseline/normalization_stats.json", "/etc/passwd", "", "manifest.json", ".verified/x", "a//b"):
        with pytest.raises(StorageError, match="not the path of an artifact inside the run"):
            b.adopt(bad, a)


def test_adopt_copies_where_it_cannot_link(
    variants: tuple[RunDir, RunDir], monkeypatch: pytest.MonkeyPatch, hash_calls: list[Path]
) -> None:
    """Another file system (EXDEV) or links refused (EPERM): each file is copied, still without a hash."""
    import errno

    a, b = variants
    rel = "datasets/train.zarr"
    calls: list[str] = []

    def refuse(src: object, dst: object, **kwargs: object) -> None:
        calls.append(str(dst))
        raise OSError(errno.EXDEV if len(calls) % 2 else errno.EPERM, "Invalid cross-device link")

    monkeypatch.setattr(os, "link", refuse)
    hash_calls.clear()
    entry = b.adopt(rel, a)
    assert len(calls) == 7 and hash_calls == []  # every file of the tree
    assert (a.path(rel) / "zarr.json").stat().st_ino != (b.path(rel) / "zarr.json").stat().st_ino
    b.verify(rel)
    assert hash_calls == []
    monkeypatch.undo()
    assert fingerprint(b.path(rel)) == (entry.sha256, entry.bytes)


def test_adopt_interrupted_leaves_no_record(variants: tuple[RunDir, RunDir], monkeypatch: pytest.MonkeyPatch) -> None:
    """A failure while the files are being linked, or just before the record is written (as a kill there
    would): no record, and never a half-built tree under the final name."""
    a, b = variants
    rel = "datasets/train.zarr"
    b.path(rel).mkdir(parents=True)
    (b.path(rel) / "own.bin").write_bytes(b"mine")
    b.record(rel, "generate-dataset", "cfg-old")
    real = os.link
    n = 0

    def fail_third(src: object, dst: object, **kwargs: object) -> None:
        nonlocal n
        n += 1
        if n == 3:
            raise OSError(28, "No space left on device")
        real(src, dst)  # type: ignore[arg-type]

    monkeypatch.setattr(os, "link", fail_third)
    with pytest.raises(StorageError, match=rf"cannot write {b.path(rel)}: No space left on device"):
        b.adopt(rel, a)
    assert b.entry(rel) is None  # the old record went first, the new one never came
    assert sorted(p.name for p in b.path(rel).iterdir()) == ["own.bin"]  # the half-linked staging was dropped
    assert not [p for p in b.path(rel).parent.iterdir() if ".tmp-" in p.name]
    monkeypatch.undo()

    import rtscore.storage.rundir as rundir

    def killed(self: RunDir, entry: object) -> None:
        raise KeyboardInterrupt

    monkeypatch.setattr(rundir.RunDir, "_write_record", killed)
    with pytest.raises(KeyboardInterrupt):
        b.adopt(rel, a)
    assert b.entry(rel) is None  # the files are in place, unrecorded: a later adopt records them
    monkeypatch.undo()
    entry = b.adopt(rel, a)
    assert same_identity(entry, a.entry(rel))


def test_manifests_without_adopted_from_still_load(tmp_path: Path) -> None:
    run = RunDir(tmp_path)
    record = {
        "path": "s.json",
        "uri": (tmp_path / "s.json").as_uri(),
        "kind": "file",
        "sha256": "0" * 64,
        "bytes": 1,
        "stage": "s",
        "config_hash": "c",
        "created": "2024-01-01T00:00:00+00:00",
    }
    run.manifest_path.write_text(json.dumps({"schema_version": 1, "artifacts": {"s.json": record}}))
    entry = run.entry("s.json")
    assert entry is not None and entry.adopted_from is None and entry.code_hash == ""
