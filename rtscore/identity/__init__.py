"""One identity per input: code (import closures), sources outside the run directory (listings), the digest of a
JSON document and the key a resume point carries (rtscore.identity.digest), the rule that resume state of
another identity is set aside (rtscore.identity.setaside), and the commit the running code was built from
(rtscore.identity.commit, for packages and MLflow runs)."""

from rtscore.identity.code import closure_hash, code_closure
from rtscore.identity.digest import canonical_json, digest, resume_key
from rtscore.identity.setaside import SET_ASIDE_DIR, set_aside
from rtscore.identity.sources import SourceError, SourceIdentity, file_identity, source_identity

__all__ = [
    "SET_ASIDE_DIR",
    "SourceError",
    "SourceIdentity",
    "canonical_json",
    "closure_hash",
    "code_closure",
    "digest",
    "file_identity",
    "resume_key",
    "set_aside",
    "source_identity",
]
