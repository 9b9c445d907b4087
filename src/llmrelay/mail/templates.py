"""The mails' words, in files next to this module (`templates/<name>.txt` and `.html`), with
`$name` placeholders (string.Template). The text file's first line is `Subject: ...`. Values
are escaped for the HTML body, never for the text body; a placeholder without a value is an
error (KeyError), not an empty gap in a mail someone reads."""

from __future__ import annotations

import html
from dataclasses import dataclass
from functools import cache
from importlib import resources
from string import Template


@dataclass(frozen=True, slots=True)
class Rendered:
    subject: str
    text: str
    html: str | None


@cache
def _source(name: str) -> str | None:
    entry = resources.files("llmrelay.mail").joinpath("templates", name)
    return entry.read_text(encoding="utf-8") if entry.is_file() else None


def render(name: str, **values: str) -> Rendered:
    """The mail `name` with `values` filled in."""
    source = _source(f"{name}.txt")
    if source is None:
        raise LookupError(f"no mail template {name!r}")
    first, _, body = source.partition("\n")
    if not first.startswith("Subject:"):
        raise ValueError(f"mail template {name!r}: the first line must be 'Subject: ...'")
    subject = Template(first.removeprefix("Subject:").strip()).substitute(values)
    text = Template(body.lstrip("\n")).substitute(values)
    page = _source(f"{name}.html")
    escaped = {key: html.escape(value) for key, value in values.items()}
    return Rendered(
        subject=" ".join(subject.split()),  # no header injection through a value
        text=text,
        html=None if page is None else Template(page).substitute(escaped),
    )
