"""Renaming the provider's model to the virtual one in whole answers."""

from __future__ import annotations

import orjson

from llmrelay.protocols.openai import ModelRename


def test_a_dated_snapshot_name_is_patched_in_the_bytes() -> None:
    raw = b'{"id":"x",  "model":"gpt-4o-mini-2024-07-18","choices":[]}'
    out = ModelRename("chat").apply(raw, orjson.loads(raw))
    assert out == b'{"id":"x",  "model":"chat","choices":[]}'  # the provider's bytes otherwise


def test_other_spacing_is_re_serialised_with_the_virtual_model() -> None:
    raw = b'{"id": "x", "model": "gpt-4o", "n": 1}'
    out = ModelRename("chat").apply(raw, orjson.loads(raw))
    assert orjson.loads(out) == {"id": "x", "model": "chat", "n": 1}


def test_a_nested_model_key_with_the_same_value_is_left_alone() -> None:
    raw = b'{"model":"m","meta":{"model":"m"}}'
    out = ModelRename("chat").apply(raw, orjson.loads(raw))
    assert orjson.loads(out) == {"model": "chat", "meta": {"model": "m"}}


def test_an_answer_without_a_model_or_already_virtual_is_unchanged() -> None:
    rename = ModelRename("chat")
    for raw in (b'{"object":"list","data":[]}', b'{"model":"chat","x":1}'):
        assert rename.apply(raw, orjson.loads(raw)) is raw


def test_a_model_name_with_quotes_is_matched_in_its_escaped_form() -> None:
    raw = orjson.dumps({"model": 'od"d', "text": '"model":"od\\"d"'})
    out = ModelRename("chat").apply(raw, orjson.loads(raw))
    assert orjson.loads(out) == {"model": "chat", "text": '"model":"od\\"d"'}
