"""How a captured body is shown by the admin API: text when it is UTF-8, else base64."""

from __future__ import annotations

import base64

from llmrelay.admin.usage_query import body_text


def test_utf8_is_text_and_anything_else_is_base64() -> None:
    assert body_text("café".encode(), False) == ("café", "utf-8")
    assert body_text(b"", False) == ("", "utf-8")
    assert body_text(None, False) == (None, None)
    binary = b"\xff\xfe\x00\x01"
    assert body_text(binary, False) == (base64.b64encode(binary).decode(), "base64")


def test_a_body_cut_inside_its_last_character_is_still_text() -> None:
    cut = "ok €".encode()[:-1]  # the cap fell inside the euro sign's three bytes
    assert body_text(cut, True) == ("ok ", "utf-8")
    # not cut by the cap: the same bytes are not UTF-8, shown as they are
    assert body_text(cut, False) == (base64.b64encode(cut).decode(), "base64")
    # invalid before its end: base64 even when cut
    broken = b"\xff" + "ok €".encode()[:-1]
    assert body_text(broken, True)[1] == "base64"
