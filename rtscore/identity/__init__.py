"""One identity per input: code (import closures), sources outside the run directory (listings), and the
rule that resume state of another identity is set aside (rtscore.identity.setaside)."""

from rtscore.identity.code import closure_hash, code_closure
from rtscore.identity.setaside import SET_ASIDE_DIR, set_aside
from rtscore.identity.sources import SourceError, SourceIdentity, file_identity, source_identity

__all__ = [
    "SET_ASIDE_DIR",
    "SourceError",
    "SourceIdentity",
    "closure_hash",
    "code_closure",
    "file_identity",
    "set_aside",
    "source_identity",
]
