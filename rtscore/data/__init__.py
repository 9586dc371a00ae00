"""Tile data: synthetic scenes and GeoTIFF ingestion into the Zarr tile store, datasets, sampling,
transforms, normalization, validation and spatial splits.

Import the module you need (``rtscore.data.store.reader``, ``rtscore.data.loading.dataset``, ...): this ``__init__``
stays empty on purpose, so that importing one module never pulls in the others (stage code fingerprints follow
real imports).
"""
