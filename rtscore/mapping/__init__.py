"""Mapping campaigns: the scene list and its resumable manifest-log, and the campaign-level RTS objects."""

DEFAULT_CHUNK_SIZE = 50  # scenes per chunk of a campaign (rts map, map-region): one place, light to import
