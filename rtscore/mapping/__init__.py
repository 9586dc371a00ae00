"""Mapping campaigns: the scene list, the resumable manifest-log, and (later) the campaign-level outputs."""
