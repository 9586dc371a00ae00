"""The digest of a JSON document and the key a resume point carries: one canonical form, one composition.

Every identity the project persists or compares (a config hash, a store's ``config_hash``, a review id, a
sweep's comparison identity, a checkpoint's or staged shards' resume key) is a sha256 over the same canonical
JSON, so that two places hashing the same document can never disagree over key order, whitespace or escaping.
A resume key is always composed the same way too (:func:`resume_key`): the code identity of the module that
does the work, then the digest of each part of what it depends on, so a resume point of one identity is never
taken for another's.
"""

from __future__ import annotations

import hashlib
import json
from typing import Any

from rtscore.identity.code import closure_hash


def canonical_json(data: Any) -> str:
    """JSON with sorted keys and no whitespace, ASCII only (anything not JSON as its ``str``): the one text every
    digest hashes."""
    return json.dumps(data, sort_keys=True, separators=(",", ":"), ensure_ascii=True, default=str)


def digest(obj: Any) -> str:
    """sha256 (hex) of ``obj``'s :func:`canonical_json`: independent of key order and formatting."""
    return hashlib.sha256(canonical_json(obj).encode()).hexdigest()


def resume_key(module: str, *parts: Any) -> str:
    """The identity a resume point of ``module``'s work carries (a checkpoint, staged shards, a tiling run's
    records, a warped scene): the code identity of ``module`` (:func:`~rtscore.identity.code.closure_hash`, its
    import closure and the versions of what it imports) and the :func:`digest` of each of ``parts`` (the config,
    the inputs' identities, ... in an order the caller fixes). Another module, other code, or any other part gives
    another key, so a resume point is only ever resumed by the work that wrote it."""
    return digest([closure_hash(module), *(digest(part) for part in parts)])
