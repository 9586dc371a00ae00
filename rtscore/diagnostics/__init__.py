"""Diagnostics that compose stages on this machine: the GPU validation sequence (`rts gpu-check`)."""
