"""Mapping campaigns: from per-scene prediction rasters to a campaign-level map."""
