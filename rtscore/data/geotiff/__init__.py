"""GeoTIFF data roots (the tile layout of docs/geotiff.md): write synthetic ones, read, check and ingest any.

One module per job; this ``__init__`` is empty on purpose, like ``rtscore.data``'s (importing one module never
pulls in another):

- ``root``: the layout of a data root, its metadata.csv and splits.yaml, each tile's files;
- ``synth``: a synthetic data root written from generation configs (``rts synth-geotiff``);
- ``root_splits``: the region split derived for a root without splits.yaml, and where it is written;
- ``selection``: the tiles of one split;
- ``labels``: a tile's label on its RGB grid (a raster, or polygons rasterised);
- ``checks``: every file of every tile checked against the raster contract before anything is written;
- ``producer``: the tiles read lazily for the store writer;
- ``staging``: a local copy of what a split needs from a ``gs://`` root;
- ``ingest``: ``rts generate --source geotiff``, the above in order.
"""
