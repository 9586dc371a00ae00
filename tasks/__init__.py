"""Thin Prefect tasks: each calls one rtscore stage and passes URIs / small pydantic models."""
