"""The tiles of a data root read lazily for the store writer (`rtscore.data.store.writer.write_store`)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import numpy as np

from rtscore.config.binding import InputBinding, RasterContract
from rtscore.data.geotiff.labels import read_label
from rtscore.data.geotiff.root import CRS, GeotiffError, TileEntry, tile_files
from rtscore.data.raster.bands import TILE_FIXES, open_checked
from rtscore.data.raster.ground import ground_pixel_area_m2
from rtscore.data.tiles import KIND_CODES, RawTile, pixel_kind, with_nodata_cleared


class GeotiffProducer:
    """Reads the selected tiles of a data root lazily through :func:`~rtscore.data.raster.bands.open_checked` (the
    contract and NoData rule of predict); picklable (paths and small records only)."""

    def __init__(
        self,
        root: str | Path,
        entries: list[TileEntry],
        binding: InputBinding,
        batch_size: int = 16,
        *,
        contract: RasterContract | None = None,
        pixel_area_m2: dict[str, float] | None = None,
    ) -> None:
        self.root = Path(root)
        self.entries = list(entries)
        self.binding = binding
        self.batch_size = batch_size
        self.contract = contract or RasterContract(crs=CRS)
        self.pixel_area_m2 = dict(pixel_area_m2 or {})

    def read(self, entry: TileEntry) -> tuple[RawTile, int]:
        """One tile as stored and its kind code, both after every NoData rule (the valid mask of
        :meth:`~rtscore.data.raster.bands.CheckedRaster.read`: alpha or the dataset mask, and the EXTRA raster's
        declared nodata): NoData pixels hold RGB 0, EXTRA 0 and label 255, and the kind is the pixels' (full NoData
        without a valid pixel, positive with a valid label-1 pixel, else negative), not metadata.csv's TrainClass."""
        files = tile_files(self.root, entry.tile_id, bool(self.binding.extra_bands))
        # Checked already (check_tiles): the EXTRA scan for non-finite values is not repeated.
        with open_checked(
            self.contract, self.binding, files["rgb"], files.get("extra"), check_finite=False, fixes=TILE_FIXES
        ) as src:
            rgb, extra, valid = src.read()
            label, problem = read_label(files["labels"], src, entry)
            area = self.pixel_area_m2.get(entry.tile_id)
            if area is None:
                t = src.src.transform
                area = ground_pixel_area_m2(src.src.crs, t, src.height, src.width, str(files["rgb"]))
            left, bottom, right, top = src.src.bounds  # in the contract's CRS (open_checked refused any other)
        if problem:
            raise GeotiffError(problem)
        alpha = np.where(valid, 255, 0).astype(np.uint8)
        tile = RawTile(
            tile_id=entry.tile_id,
            region=entry.region,
            rgb=np.ascontiguousarray(rgb),
            alpha=alpha,
            label_exact=label,
            extra=None if extra is None else np.ascontiguousarray(extra, np.float32),
            n_objects=entry.n_uids,
            source_index=entry.row,
            pixel_area_m2=area,
            bounds=(float(left), float(bottom), float(right), float(top)),
            inventory=entry.inventory,
        )
        tile = with_nodata_cleared(tile)
        return tile, KIND_CODES[pixel_kind(tile.alpha, tile.label_exact)]

    def batches(self, start: int, stop: int) -> Iterator[tuple[list[RawTile], list[int]]]:
        for a in range(start, stop, self.batch_size):
            read = [self.read(e) for e in self.entries[a : min(a + self.batch_size, stop)]]
            yield [t for t, _ in read], [c for _, c in read]
