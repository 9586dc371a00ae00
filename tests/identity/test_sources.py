"""The listing identity of a data root: every add, removal or rewrite changes it; reading it reads no raster."""

from __future__ import annotations

import os
import time
import uuid
from pathlib import Path

import pytest

from rtscore.identity import SourceError, source_identity
from rtscore.identity import sources as sources_module


def _root(tmp_path: Path) -> Path:
    root = tmp_path / "root"
    for d in ("PLANET-RGB", "PLANET-LABEL"):
        (root / d).mkdir(parents=True)
        for i in range(3):
            (root / d / f"t{i}.tif").write_bytes(bytes([i]) * 1000)
    (root / "metadata.csv").write_text("TileID,RegionName\nt0,a\nt1,a\nt2,b\n")
    (root / "splits.yaml").write_text("train: [a]\nval: [b]\ntest: []\n")
    return root


def test_every_add_removal_and_rewrite_of_a_local_root_changes_its_identity(tmp_path: Path) -> None:
    root = _root(tmp_path)
    first = source_identity(root)
    assert source_identity(root) == first and first.files == 8 and first.uri == str(root.resolve())

    seen = {first.digest}

    def changed() -> None:
        now = source_identity(root).digest
        assert now not in seen
        seen.add(now)

    (root / "PLANET-RGB/t3.tif").write_bytes(b"new")  # added
    changed()
    (root / "PLANET-RGB/t3.tif").unlink()  # removed
    assert source_identity(root).digest == first.digest, "back to the same listing"
    label = root / "PLANET-LABEL/t1.tif"
    st = label.stat()
    label.write_bytes(bytes([9]) * 1000)  # rewritten, same size
    changed()
    # A small table rewritten with the same size and its old mtime restored is still seen (content-hashed).
    meta = root / "metadata.csv"
    st = meta.stat()
    meta.write_text(meta.read_text().replace("t2,b", "t2,a"))
    os.utime(meta, ns=(st.st_atime_ns, st.st_mtime_ns))
    changed()
    # Issue 38: a raster rewritten in place, its size, inode and old mtime kept, is seen too (not content-hashed:
    # its change time moved). The sleep steps past the kernel clock tick of the listing above (the one window).
    tile = root / "PLANET-RGB/t0.tif"
    st = tile.stat()
    time.sleep(0.02)
    with tile.open("r+b") as f:
        f.write(bytes([7]) * 1000)
    os.utime(tile, ns=(st.st_atime_ns, st.st_mtime_ns))
    now = tile.stat()
    assert (now.st_size, now.st_mtime_ns, now.st_ino) == (st.st_size, st.st_mtime_ns, st.st_ino)
    changed()
    # The same files through another path (a symbolic link to the root) are the same identity.
    (tmp_path / "link").symlink_to(root)
    assert source_identity(tmp_path / "link").digest == source_identity(root).digest


def test_hidden_bookkeeping_is_not_part_of_a_root(tmp_path: Path) -> None:
    root = _root(tmp_path)
    before = source_identity(root)
    (root / ".rts-tile").mkdir()
    (root / ".rts-tile/state.json").write_text("{}")
    (root / "PLANET-RGB/.t9.tif.partial").write_bytes(b"x")
    assert source_identity(root) == before


def test_listing_a_root_reads_no_raster(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    root = _root(tmp_path)
    hashed: list[Path] = []
    real = sources_module.sha256_file
    monkeypatch.setattr(sources_module, "sha256_file", lambda p: hashed.append(Path(p)) or real(p))
    source_identity(root)
    assert sorted(p.name for p in hashed) == ["metadata.csv", "splits.yaml"]


def test_a_missing_root_is_named(tmp_path: Path) -> None:
    with pytest.raises(SourceError, match="nowhere"):
        source_identity(tmp_path / "nowhere")


def test_a_gs_root_is_identified_by_one_listing_of_generations(
    tmp_path: Path, gcs_emulator: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    from google.auth.credentials import AnonymousCredentials
    from google.cloud import storage

    from tests.conftest import GCS_TEST_BUCKET

    root = _root(tmp_path)
    prefix = f"{uuid.uuid4().hex[:8]}/root"
    bucket = storage.Client(project="test", credentials=AnonymousCredentials()).bucket(GCS_TEST_BUCKET)
    for f in root.rglob("*"):
        if f.is_file():
            bucket.blob(f"{prefix}/{f.relative_to(root).as_posix()}").upload_from_filename(str(f))
    uri = f"gs://{GCS_TEST_BUCKET}/{prefix}"
    first = source_identity(uri)
    assert first.files == 8 and first.uri == uri and source_identity(uri + "/") == first
    seen = {first.digest}
    for change in (
        lambda: bucket.blob(f"{prefix}/PLANET-RGB/t3.tif").upload_from_string(b"new"),  # added
        lambda: bucket.blob(f"{prefix}/PLANET-RGB/t0.tif").delete(),  # removed
        lambda: bucket.blob(f"{prefix}/PLANET-LABEL/t1.tif").upload_from_string(bytes([1]) * 1000),  # same bytes
    ):
        change()
        now = source_identity(uri).digest
        assert now not in seen, "a new generation is a new identity, even of the same bytes"
        seen.add(now)
    with pytest.raises(SourceError, match="holds no object"):
        source_identity(f"gs://{GCS_TEST_BUCKET}/{uuid.uuid4().hex}")


def test_a_file_that_cannot_be_read_is_named_not_a_traceback(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    root = _root(tmp_path)

    def refuse(path: Path) -> str:
        raise PermissionError(13, "Permission denied", str(path))

    monkeypatch.setattr(sources_module, "sha256_file", refuse)
    with pytest.raises(SourceError, match=r"metadata.csv: cannot read it to identify .*: Permission denied"):
        source_identity(root)
