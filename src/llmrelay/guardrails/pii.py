"""Personal data detectors: email addresses, phone numbers, payment card numbers, IBANs.

Each is a regular expression that proposes candidates and a check in Python that confirms
them: a card number must pass the Luhn checksum and fit a card network's prefix and length,
an IBAN its country's length and the mod-97 checksum, a phone number the digit counts of
E.164 or of a national format. Every quantifier is bounded, so a candidate costs a bounded
number of steps per position: scanning is linear in the text's length, whatever it holds.

Known limits (docs/guardrails.md lists them with examples): ASCII email addresses only (no
internationalised domains); national phone numbers in the North American 3-3-4 format or
with a leading trunk 0 and consistent separators (a bare run of ten digits is not a phone
number here: it is as often an order number); IBANs in capitals.
"""

from __future__ import annotations

import itertools
import re
from typing import Final

from llmrelay.guardrails.spans import Span, luhn_valid

# -- email ----------------------------------------------------------------------------------

#: The domain after an `@` (the local part before it is walked back to in Python: a pattern
#: that starts with a character class is tried at every position of the text, an `@` is rare).
_EMAIL_DOMAIN: Final = re.compile(
    r"(?:[A-Za-z0-9](?:[A-Za-z0-9-]{0,61}[A-Za-z0-9])?\.){1,8}"
    r"([A-Za-z]{2,24})(?![A-Za-z0-9-])"
)
_LOCAL_PART: Final = frozenset(
    "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789._%+-"
)
#: "icon@2x.png" and its kind are file names, not addresses.
_FILE_SUFFIXES: Final = frozenset({"png", "jpg", "jpeg", "gif", "svg", "webp", "ico", "bmp"})


def find_emails(text: str) -> list[Span]:
    """Addresses outside URLs: in `https://user@host/...` or `https://x.com/@a@b.io` the
    `@` belongs to the URL, not to an address (a `mailto:` address is one)."""
    found: list[Span] = []
    at = text.find("@")
    while at >= 0:
        start = at
        while start > 0 and at - start < 65 and text[start - 1] in _LOCAL_PART:
            start -= 1
        domain = _EMAIL_DOMAIN.match(text, at + 1)
        if (
            domain is not None
            and 0 < at - start <= 64
            and (start == 0 or text[start - 1] not in _LOCAL_PART)
            and domain.group(1).lower() not in _FILE_SUFFIXES
            and not _inside_url(text, start)
        ):
            found.append((start, domain.end(), "email"))
        at = text.find("@", at + 1)
    return found


def _inside_url(text: str, start: int) -> bool:
    """Whether the whitespace-delimited word holding `start` has a `scheme://` before it."""
    word_start = max(text.rfind(" ", 0, start), text.rfind("\n", 0, start)) + 1
    return "://" in text[word_start:start]


# -- phone numbers --------------------------------------------------------------------------

#: One pattern per format, each beginning with its first character and only then looking
#: behind it: a pattern that begins with a lookbehind or an alternation is tried at every
#: position of the text, one that begins with a character is looked for first (several times
#: faster over prose).
_BEFORE: Final = r"[\w+#/.:=-]"
_AFTER: Final = r"(?!\w|[.,-]\d)"
#: E.164 and international formats: +, country code, then digits and separators
_INTERNATIONAL: Final = re.compile(rf"\+(?<!{_BEFORE}\+)[1-9][\d ().-]{{6,22}}\d{_AFTER}")
#: North American: (NXX) NXX-XXXX, NXX-NXX-XXXX, NXX.NXX.XXXX, optionally with 1 first
_NORTH_AMERICAN: Final = re.compile(
    rf"[(1-9](?<!{_BEFORE}[(1-9])(?<=[(\d])"
    r"(?:(?<=\()[2-9]\d{2}\) ?|(?<=1)[ .-]?(?:\([2-9]\d{2}\) ?|[2-9]\d{2}[ .-])"
    r"|(?<=[2-9])\d{2}[ .-])"
    rf"[2-9]\d{{2}}[ .-]\d{{4}}{_AFTER}"
)
#: national formats with a trunk 0 and one kind of separator: 06 12 34 56 78, 020 7946 0958,
#: 030-1234567, 01.23.45.67.89
_TRUNK: Final = re.compile(
    rf"0(?<!{_BEFORE}0)\d{{1,4}}(?P<sep>[ .-])\d{{2,8}}(?:(?P=sep)\d{{2,8}}){{0,3}}{_AFTER}"
)


def find_phones(text: str) -> list[Span]:
    found: list[Span] = []
    for match in _INTERNATIONAL.finditer(text):
        value = match.group()
        if 8 <= sum(c.isdigit() for c in value) <= 15 and _tidy_separators(value):
            found.append((match.start(), match.end(), "phone"))
    found += [(m.start(), m.end(), "phone") for m in _NORTH_AMERICAN.finditer(text)]
    for match in _TRUNK.finditer(text):
        if 9 <= sum(c.isdigit() for c in match.group()) <= 11:
            found.append((match.start(), match.end(), "phone"))
    if len(found) < 2:
        return found
    return _apart(sorted(found, key=lambda s: (s[0], -s[1])))


def _apart(spans: list[Span]) -> list[Span]:
    """Spans of the three formats without overlaps (the earlier, then the longer, wins)."""
    kept: list[Span] = []
    for span in spans:
        if kept and span[0] < kept[-1][1]:
            continue
        kept.append(span)
    return kept


def _tidy_separators(value: str) -> bool:
    """An international number's separators: single ones between digit groups, at most one
    pair of parentheses around a group ("+44 (0)20 7946 0958"), no dangling parenthesis."""
    if value.count("(") != value.count(")") or value.count("(") > 1:
        return False
    if "(" in value and value.index("(") > value.index(")"):
        return False
    squeezed = value.replace(") ", ")").replace(" (", "(")
    return not any(a in " .-" and b in " .-" for a, b in itertools.pairwise(squeezed))


# -- payment cards --------------------------------------------------------------------------

_CARD: Final = re.compile(r"\d(?<![\w.,-]\d)(?:[ -]?\d){11,99}(?!\w|[.,]\d)")
_CARD_SEPARATORS: Final = re.compile(r"[ -]")


def find_cards(text: str) -> list[Span]:
    """Numbers of 13 to 19 digits, written whole or in groups (4-4-4-4, 4-6-5...) with one
    kind of separator, that pass the Luhn check and begin as a card network's numbers do.
    When more digit groups follow a card number ("4111 1111 1111 1111 2030"), the longest
    run of groups that is a valid number is the card."""
    found: list[Span] = []
    for match in _CARD.finditer(text):
        value = match.group()
        start = match.start()
        separators = set(_CARD_SEPARATORS.findall(value))
        if not separators:
            if 13 <= len(value) <= 19 and is_card_number(value):
                found.append((start, match.end(), "card"))
            continue
        if len(separators) > 1:
            continue
        offset = start
        for first, last in _grouped_cards(value.split(separators.pop())):
            found.append((offset + first, offset + last, "card"))
    return found


def _grouped_cards(groups: list[str]) -> list[tuple[int, int]]:
    """Where card numbers are in a run of digit groups: from each group of four, the longest
    run of groups that is a valid number ("5 4111 1111 1111 1111 2030" holds one, between an
    unrelated digit and a year; two numbers written one after the other are two)."""
    found: list[tuple[int, int]] = []
    starts = [0]
    for group in groups:
        starts.append(starts[-1] + len(group) + 1)
    first = 0
    while first < len(groups) - 1:
        taken = None
        if len(groups[first]) == 4:
            for last in range(min(len(groups), first + 8), first + 1, -1):
                digits = "".join(groups[first:last])
                if 13 <= len(digits) <= 19 and is_card_number(digits):
                    taken = last
                    break
        if taken is None:
            first += 1
            continue
        found.append((starts[first], starts[taken] - 1))
        first = taken
    return found


def is_card_number(digits: str) -> bool:
    return _plausible_card(digits) and luhn_valid(digits)


def _plausible_card(digits: str) -> bool:
    """The issuer ranges and lengths of the major networks (ISO/IEC 7812 IINs)."""
    n = len(digits)
    if digits[0] == "4":  # Visa
        return n in (13, 16, 19)
    p2, p3, p4, p6 = int(digits[:2]), int(digits[:3]), int(digits[:4]), int(digits[:6])
    if 51 <= p2 <= 55 or 2221 <= p4 <= 2720:  # Mastercard
        return n == 16
    if p2 in (34, 37):  # American Express
        return n == 15
    if 2200 <= p4 <= 2204:  # Mir
        return 16 <= n <= 19
    if p4 == 6011 or 644 <= p3 <= 649 or p2 == 65 or 622126 <= p6 <= 622925:  # Discover
        return 16 <= n <= 19
    if 3528 <= p4 <= 3589:  # JCB
        return 16 <= n <= 19
    if 300 <= p3 <= 305 or p2 in (36, 38, 39) or p4 == 3095:  # Diners Club
        return 14 <= n <= 19
    if p2 == 62:  # UnionPay
        return 16 <= n <= 19
    if p2 == 50 or 56 <= p2 <= 69:  # Maestro
        return 13 <= n <= 19
    return False


# -- IBAN -----------------------------------------------------------------------------------

#: IBAN length per country (the SWIFT IBAN registry).
IBAN_LENGTHS: Final = {
    **dict.fromkeys(("NO",), 15),
    **dict.fromkeys(("BE",), 16),
    **dict.fromkeys(("DK", "FI", "FK", "FO", "GL", "NL", "SD"), 18),
    **dict.fromkeys(("MK", "SI"), 19),
    **dict.fromkeys(("AT", "BA", "EE", "KZ", "LT", "LU", "MN", "XK"), 20),
    **dict.fromkeys(("CH", "HR", "LI", "LV"), 21),
    **dict.fromkeys(("BG", "BH", "CR", "DE", "GB", "GE", "IE", "ME", "RS", "VA"), 22),
    **dict.fromkeys(("AE", "GI", "IL", "IQ", "OM", "SO", "TL"), 23),
    **dict.fromkeys(("AD", "CZ", "ES", "MD", "PK", "RO", "SA", "SE", "SK", "TN", "VG"), 24),
    **dict.fromkeys(("LY", "PT", "ST"), 25),
    **dict.fromkeys(("IS", "TR"), 26),
    **dict.fromkeys(("BI", "DJ", "FR", "GR", "IT", "MC", "MR", "SM"), 27),
    **dict.fromkeys(("AL", "AZ", "BY", "CY", "DO", "GT", "HU", "LB", "NI", "PL", "SV"), 28),
    **dict.fromkeys(("BR", "EG", "PS", "QA", "UA"), 29),
    **dict.fromkeys(("JO", "KW", "MU", "YE"), 30),
    **dict.fromkeys(("MT", "SC"), 31),
    **dict.fromkeys(("LC",), 32),
    **dict.fromkeys(("RU",), 33),
}
_IBAN_START: Final = re.compile(r"[A-Z](?<![A-Za-z0-9][A-Z])[A-Z]\d{2}(?=[ A-Z0-9])")


def find_ibans(text: str) -> list[Span]:
    """IBANs written whole or in groups of four separated by single spaces, of their
    country's exact length, whose check digits hold (ISO 13616 mod 97)."""
    found: list[Span] = []
    position = 0
    while True:
        match = _IBAN_START.search(text, position)
        if match is None:
            return found
        start = match.start()
        length = IBAN_LENGTHS.get(text[start : start + 2])
        end = _iban_end(text, start, length) if length is not None else None
        if end is not None and iban_valid(text[start:end].replace(" ", "")):
            found.append((start, end, "iban"))
            position = end
        else:
            position = match.end()


def _iban_end(text: str, start: int, length: int) -> int | None:
    """Where `length` capitals and digits from `start` end (single spaces between them
    allowed), provided no letter or digit follows; else None."""
    count = 0
    index = start
    size = len(text)
    while index < size and count < length:
        char = text[index]
        if "A" <= char <= "Z" or "0" <= char <= "9":
            count += 1
        elif char != " " or text[index - 1] == " " or index + 1 >= size:
            return None
        index += 1
    if count < length or (index < size and text[index].isalnum()):
        return None
    return index


def iban_valid(iban: str) -> bool:
    """Country length and the mod-97 checksum of an IBAN without spaces."""
    if IBAN_LENGTHS.get(iban[:2]) != len(iban):
        return False
    rearranged = iban[4:] + iban[:4]
    number = "".join(str(int(c, 36)) for c in rearranged)
    return int(number) % 97 == 1
