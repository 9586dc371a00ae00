"""Prefect flows: compose rtscore stages, publish Prefect artifacts."""
