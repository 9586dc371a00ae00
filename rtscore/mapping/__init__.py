"""Mapping campaigns: the scene list and its resumable manifest-log, and the campaign-level RTS objects."""
