"""Every mail template renders with its values; values are escaped in the HTML body (a tenant
named `<script>` stays text) and left as they are in the text body; a missing value is an
error, never a gap in a mail someone reads."""

from __future__ import annotations

from importlib import resources

import pytest

from llmrelay.mail.templates import render

VALUES = {
    "inviter": "ann@example.com",
    "tenant": "Acme <script>alert(1)</script> & Co",
    "role": "viewer",
    "link": "https://console.example/accept-invitation?token=abc&x=1",
    "expires": "2030-01-01 00:00 UTC",
    "email": "bob@example.com",
    "purpose": "",
    "balance": "$1.00",
    "threshold": "$5.00",
    "consequence": "",
    "scope": "Project web",
    "spend": "$80.00",
    "budget": "$100.00",
    "month": "2030-01",
    "percent": "80",
}
NAMES = sorted(
    entry.name.removesuffix(".txt")
    for entry in resources.files("llmrelay.mail").joinpath("templates").iterdir()
    if entry.name.endswith(".txt")
)


@pytest.mark.parametrize("name", NAMES)
def test_each_template_renders(name: str) -> None:
    mail = render(name, **VALUES)
    assert mail.subject and "$" not in mail.subject.replace("$1.00", "").replace("$5.00", "")
    assert "\n" not in mail.subject
    assert mail.html is not None and "<script>" not in mail.html
    if "$tenant" in (resources.files("llmrelay.mail") / "templates" / f"{name}.html").read_text():
        assert "Acme &lt;script&gt;alert(1)&lt;/script&gt; &amp; Co" in mail.html


def test_links_survive_in_both_bodies() -> None:
    mail = render("invitation", **VALUES)
    assert VALUES["link"] in mail.text
    assert "https://console.example/accept-invitation?token=abc&amp;x=1" in str(mail.html)


def test_a_missing_value_is_an_error() -> None:
    with pytest.raises(KeyError):
        render("password_reset", email="bob@example.com")
