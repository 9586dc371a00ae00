"""One digest of a JSON document and one composition of a resume key (rtscore.identity.digest)."""

from __future__ import annotations

import hashlib
from pathlib import Path

import pytest

from rtscore.config.base import config_hash
from rtscore.config.pipeline import PipelineConfig
from rtscore.identity import canonical_json, closure_hash, digest, resume_key
from tests.helpers import CodeEdits


def test_the_canonical_form_sorts_keys_drops_whitespace_escapes_to_ascii_and_strs_the_rest() -> None:
    doc = {"b": [1, 2.5, None, True], "a": {"é": "x"}, "p": Path("/d")}
    assert canonical_json(doc) == '{"a":{"\\u00e9":"x"},"b":[1,2.5,null,true],"p":"/d"}'
    assert digest(doc) == hashlib.sha256(canonical_json(doc).encode()).hexdigest()
    assert len(digest(doc)) == 64


def test_a_digest_is_independent_of_key_order_and_sees_every_value() -> None:
    assert digest({"a": 1, "b": {"x": [1, 2], "y": "z"}}) == digest({"b": {"y": "z", "x": [1, 2]}, "a": 1})
    assert digest({"a": 1}) != digest({"a": 2})
    assert digest([1, 2]) != digest([2, 1]), "list order is content"
    assert digest("1") != digest(1)


def test_a_config_hash_is_the_digest_of_its_json_dump() -> None:
    cfg = PipelineConfig()
    assert config_hash(cfg) == digest(cfg.model_dump(mode="json"))


MODULE_A = "rtscore.identity.setaside"
MODULE_B = "rtscore.identity.sources"


def test_a_resume_key_is_the_code_identity_and_the_digest_of_each_part() -> None:
    key = resume_key(MODULE_A, {"x": 1}, "abc")
    assert key == digest([closure_hash(MODULE_A), digest({"x": 1}), digest("abc")])
    assert key == resume_key(MODULE_A, {"x": 1}, "abc"), "stable"


def test_two_modules_give_two_keys_for_the_same_parts() -> None:
    assert resume_key(MODULE_A, "cfg") != resume_key(MODULE_B, "cfg")
    assert resume_key(MODULE_A) != resume_key(MODULE_B)


def test_every_part_and_its_place_changes_the_key() -> None:
    base = resume_key(MODULE_A, "a", "b")
    assert resume_key(MODULE_A, "b", "a") != base
    assert resume_key(MODULE_A, "a") != base
    assert resume_key(MODULE_A, "a", "b", "c") != base
    assert resume_key(MODULE_A, ["a", "b"]) != base, "parts are digested one by one, not flattened"


def test_an_edit_in_the_module_closure_changes_the_key(monkeypatch: pytest.MonkeyPatch) -> None:
    before = resume_key(MODULE_A, "cfg")
    CodeEdits(monkeypatch).edit("rtscore/identity/setaside.py")
    assert resume_key(MODULE_A, "cfg") != before
    assert resume_key(MODULE_B, "cfg") == resume_key(MODULE_B, "cfg")
