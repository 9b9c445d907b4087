"""HTML form fields to admin API bodies, and the admin API's error back onto a field.

The console converts only shapes (text, lists, checkboxes, dotted names into nested objects);
it validates nothing: a number stays the text the user typed and the admin API's schema
judges it (a wrong one comes back as a 400 naming the field, shown next to that input with
the user's input kept)."""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

from llmrelay.console.admin_client import Answer
from llmrelay.console.messages import plain

Kind = Literal["text", "list", "bool", "lines"]
_SPLIT = re.compile(r"[\s,]+")
#: A list member's path in an admin error (`scopes[1]`): the list's name.
_MEMBER = re.compile(r"([\w.]+)\[\d+\]")


def text(fields: Mapping[str, str], name: str) -> str | None:
    value = fields.get(name, "").strip()
    return value or None


def words(value: str | None) -> list[str]:
    """A list typed as words separated by commas, spaces or new lines."""
    return [w for w in _SPLIT.split(value or "") if w]


def body_of(
    fields: Mapping[str, str], spec: Mapping[str, Kind], *, clear_empty: bool
) -> dict[str, Any]:
    """The body for the fields in `spec`. Dotted names nest (`limits.rpm`). An empty input is
    left out of a create; in a change it clears the field (None), while an empty member of a
    group (`limits.rpm`) is left out of the group, which is replaced whole."""
    body: dict[str, Any] = {}
    for name, kind in spec.items():
        raw = fields.get(name, "")
        value: Any
        if kind == "bool":
            value = raw in ("on", "true", "1")
        elif kind == "list":
            value = words(raw) or None
        elif kind == "lines":
            value = [line.strip() for line in raw.splitlines() if line.strip()] or None
        else:
            value = raw.strip() or None
        group, _, member = name.partition(".")
        if member:
            holder = body.setdefault(group, {})
            if value is not None:
                holder[member] = value
            continue
        if value is None and not clear_empty:
            continue
        body[name] = value
    return body


@dataclass
class FormState:
    """A form as the page shows it again: the user's input and the errors by field."""

    values: dict[str, str] = field(default_factory=dict)
    errors: dict[str, str] = field(default_factory=dict)
    #: An error that names no field of the form (or a refusal: 403, 409...).
    message: str | None = None

    @classmethod
    def failed(
        cls, values: Mapping[str, str], answer: Answer, names: Mapping[str, str] | None = None
    ) -> FormState:
        """Every error the admin API named, next to its input in plain words (`names` maps
        an admin field path to the form's input name when they differ); one that names no
        input of the form goes above it. The input is kept (the CSRF token never)."""
        state = cls(values={k: v for k, v in values.items() if k != "csrf_token"})
        above: list[str] = []
        for place, message in answer.errors:
            if place is not None and names:
                place = names.get(place, place)
            if place is not None and place not in values:
                # A list's member (`scopes[1]`) is shown next to the list's one input.
                member = _MEMBER.fullmatch(place)
                if member is not None and member[1] in values:
                    state.errors.setdefault(member[1], plain(message))
                    continue
            if place is not None and place in values:
                state.errors.setdefault(place, plain(message, place))
            else:
                above.append(plain(message) if place else message)
        if above:
            state.message = "; ".join(dict.fromkeys(above))
        return state
