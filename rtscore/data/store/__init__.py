"""The Zarr v3 tile store (docs/store-format.md): its format and attributes, the reader, the shard writer, the fast
shard reader, and the legacy batched npz layout.
"""
