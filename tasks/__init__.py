"""Thin Prefect tasks: each calls one rtscore stage and passes URIs / small pydantic models; and the artifact makers
(one card per key in a flow run) that the tasks and flows publish with."""
