"""Running a guard's rules over the text fields of one body (fields.py finds them).

Every rule runs over every text value. Each match is a hit, counted per (rule, kind, field)
with the number of characters it covered, never the text itself. Matches of `mask` and
`block` rules are replaced by their placeholders in the body (overlapping ones merged, the
first placeholder kept), so only text values change; a `block` match also marks the body
as blocked, which the caller turns into an error once every field has been screened (so the
audit trail of a blocked request is complete).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Final

from llmrelay.guardrails.policy import AUDIT, BLOCK, Rule
from llmrelay.guardrails.spans import Span

#: Hit rows one body may produce; more distinct (rule, kind, field) triples are counted in
#: the last row under the field "(more fields)".
MAX_HITS: Final = 100
MORE_FIELDS: Final = "(more fields)"

Path = tuple[str | int, ...]


class ScanLimitExceeded(Exception):
    """The body holds more text than the gateway screens (fail closed: it is refused)."""

    def __init__(self, limit: int) -> None:
        super().__init__(f"more than {limit} characters of text to screen")
        self.limit = limit


class Hit:
    """Matches of one rule and kind in one field."""

    __slots__ = ("chars", "count", "field", "kind", "rule")

    def __init__(self, rule: Rule, kind: str, field: str) -> None:
        self.rule = rule
        self.kind = kind
        self.field = field
        self.count = 0
        self.chars = 0


class Blocked:
    """The first block: which rule, what it found, where."""

    __slots__ = ("field", "kind", "rule")

    def __init__(self, rule: Rule, kind: str, field: str) -> None:
        self.rule = rule
        self.kind = kind
        self.field = field


class Screening:
    """One body's screening: call `text` for each text value, then read the outcome."""

    __slots__ = ("_hits", "_left", "blocked", "changed", "rules")

    def __init__(self, rules: Sequence[Rule], max_chars: int) -> None:
        self.rules = rules
        self._hits: dict[tuple[int, str, str], Hit] = {}
        self._left = max_chars
        self.blocked: Blocked | None = None
        self.changed = False

    @property
    def hits(self) -> list[Hit]:
        return list(self._hits.values())

    def text(self, holder: Any, key: Any, path: Path) -> None:
        """Screen `holder[key]` (a str), replacing it when a mask or block rule matched."""
        text: str = holder[key]
        if not text:
            return
        self._left -= len(text)
        if self._left < 0:
            raise ScanLimitExceeded(self._left + len(text))
        replaced: list[tuple[int, int, str]] | None = None
        field: str | None = None
        for index, rule in enumerate(self.rules):
            spans = rule.find(text)
            if not spans:
                continue
            if field is None:
                field = format_path(path)
            self._count(index, rule, spans, field)
            if rule.action == AUDIT:
                continue
            if replaced is None:
                replaced = []
            replaced += [(start, end, rule.placeholder_for(kind)) for start, end, kind in spans]
            if rule.action == BLOCK and self.blocked is None:
                self.blocked = Blocked(rule, spans[0][2], field)
        if replaced:
            holder[key] = redact(text, replaced)
            self.changed = True

    def _count(self, index: int, rule: Rule, spans: list[Span], field: str) -> None:
        hits = self._hits
        for start, end, kind in spans:
            key = (index, kind, field)
            hit = hits.get(key)
            if hit is None:
                if len(hits) >= MAX_HITS - 1:
                    key = (index, kind, MORE_FIELDS)
                    hit = hits.get(key)
                if hit is None:
                    hit = hits[key] = Hit(rule, kind, key[2])
            hit.count += 1
            hit.chars += end - start


def redact(text: str, replacements: list[tuple[int, int, str]]) -> str:
    """`text` with each (start, end) replaced by its placeholder; overlapping ranges are
    merged into one (the placeholder of the one that starts first, the longest of those)."""
    replacements.sort(key=_start_then_longest)
    parts: list[str] = []
    position = 0
    current_end = -1
    for start, end, placeholder in replacements:
        if start < current_end:  # overlaps the one just replaced: extend it
            if end > current_end:
                current_end = end
                position = end
            continue
        parts.append(text[position:start])
        parts.append(placeholder)
        position = current_end = end
    parts.append(text[position:])
    return "".join(parts)


def _start_then_longest(item: tuple[int, int, str]) -> tuple[int, int]:
    return (item[0], -item[1])


def format_path(path: Path) -> str:
    """("messages", 2, "content") -> "messages[2].content"."""
    out = ""
    for part in path:
        if isinstance(part, int):
            out += f"[{part}]"
        else:
            out += f".{part}" if out else part
    return out
