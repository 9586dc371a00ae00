"""rtscore: the pure library behind the RTS segmentation pipeline (no Prefect imports here)."""

__version__ = "0.1.0"
