"""Personal data detectors: what each must find, and look-alikes it must leave alone."""

from __future__ import annotations

import pytest

from llmrelay.guardrails import pii


def _found(spans: list[tuple[int, int, str]], text: str) -> list[str]:
    return [text[start:end] for start, end, _ in spans]


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("write to jane.doe+news@example.co.uk today", ["jane.doe+news@example.co.uk"]),
        ("mailto:bob@corp.io", ["bob@corp.io"]),
        ("<a.b@sub.example.org>", ["a.b@sub.example.org"]),
        ("two: x@y.io, z_9@w-w.dev.", ["x@y.io", "z_9@w-w.dev"]),
        # false positives it must not take
        ("https://user@example.com/path", []),  # the userinfo of a URL
        ("see https://maps.example.com/@jane@example.com", []),  # inside a URL
        ("retina asset icon@2x.png", []),
        ("npm i left-pad@1.3.0", []),  # a version, not a domain
        ("root@localhost", []),  # no top-level domain
        ("an @ sign alone", []),
    ],
)
def test_emails(text: str, expected: list[str]) -> None:
    assert _found(pii.find_emails(text), text) == expected


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("call +1 415-555-2671 now", ["+1 415-555-2671"]),
        ("+44 20 7946 0958", ["+44 20 7946 0958"]),
        ("+44 (0)20 7946 0958", ["+44 (0)20 7946 0958"]),
        ("E.164: +14155552671.", ["+14155552671"]),
        ("(415) 555-2671", ["(415) 555-2671"]),
        ("415.555.2671 or 1-415-555-2671", ["415.555.2671", "1-415-555-2671"]),
        ("portable 06 12 34 56 78", ["06 12 34 56 78"]),
        ("London 020 7946 0958", ["020 7946 0958"]),
        ("07700 900123", ["07700 900123"]),
        ("Berlin 030-1234567", ["030-1234567"]),
        ("01.23.45.67.89", ["01.23.45.67.89"]),
        # dates, times, ids, addresses, amounts: not phone numbers
        ("on 2024-01-15 at 10:30", []),
        ("15/01/2024", []),
        ("01.02.2024", []),
        ("01-02-2024 10", []),  # a date then an hour: mixed separators
        ("order 1234567890", []),  # a bare run of digits
        ("ORD-555-123-4567", []),  # part of an id
        ("#415-555-2671", []),
        ("ip 192.168.100.200", []),
        ("total 1,234,567,890", []),
        ("version 10.2.33.4", []),
        ("+1.5 million", []),
        ("123-456-7890", []),  # area code cannot start with 1
        ("555-0100", []),  # seven digits
    ],
)
def test_phones(text: str, expected: list[str]) -> None:
    assert _found(pii.find_phones(text), text) == expected


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("card 4111 1111 1111 1111 exp 12/30", ["4111 1111 1111 1111"]),
        ("4111111111111111", ["4111111111111111"]),
        ("5555-5555-5555-4444", ["5555-5555-5555-4444"]),
        ("amex 3782 822463 10005", ["3782 822463 10005"]),
        ("378282246310005", ["378282246310005"]),
        ("6011111111111117", ["6011111111111117"]),
        ("2223003122003222", ["2223003122003222"]),  # Mastercard 2-series
        ("3530111333300000", ["3530111333300000"]),  # JCB
        ("30569309025904", ["30569309025904"]),  # Diners, 14 digits
        ("4111 1111 1111 1111 2030", ["4111 1111 1111 1111"]),  # a year after it
        ("room 5 4111 1111 1111 1111", ["4111 1111 1111 1111"]),  # a digit before it
        (
            "0000 0000 4111 1111 1111 1111 5555 5555 5555 4444",
            [
                "4111 1111 1111 1111",
                "5555 5555 5555 4444",
            ],
        ),
        # fails Luhn, wrong prefix or length, mixed separators, part of something else
        ("4111111111111112", []),
        ("1234 5678 9012 3456", []),
        ("9111111111111111", []),  # passes no network's prefix... and Luhn is moot
        ("4111-1111 1111-1111", []),
        ("5555555555554444555", []),  # 19 digits: a Mastercard is 16
        ("id 0.4111111111111111", []),
        ("411111111111", []),  # 12 digits
    ],
)
def test_cards(text: str, expected: list[str]) -> None:
    assert _found(pii.find_cards(text), text) == expected


def test_luhn_is_the_check() -> None:
    """Every last digit but one fails: the checksum, not the shape, decides."""
    valid = [d for d in "0123456789" if pii.is_card_number("411111111111111" + d)]
    assert valid == ["1"]


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("IBAN DE89 3704 0044 0532 0130 00.", ["DE89 3704 0044 0532 0130 00"]),
        ("GB82WEST12345698765432", ["GB82WEST12345698765432"]),
        ("FR14 2004 1010 0505 0001 3M02 606", ["FR14 2004 1010 0505 0001 3M02 606"]),
        ("NO93 8601 1117 947 and more", ["NO93 8601 1117 947"]),
        (
            "two DE89370400440532013000 GB82WEST12345698765432",
            [
                "DE89370400440532013000",
                "GB82WEST12345698765432",
            ],
        ),
        # wrong checksum, wrong length for the country, unknown country, lower case
        ("DE89 3704 0044 0532 0130 01", []),
        ("DE89 3704 0044 0532 0130", []),
        ("ZZ89 3704 0044 0532 0130 00", []),
        ("de89370400440532013000", []),
        ("DE89370400440532013000X", []),
    ],
)
def test_ibans(text: str, expected: list[str]) -> None:
    assert _found(pii.find_ibans(text), text) == expected


@pytest.mark.parametrize(
    "text",
    ["a" * 100_000, "1 " * 50_000, ("x" * 64 + "@") * 1500, "+1 " * 30_000, "DE89 " * 20_000],
)
def test_scans_are_linear(text: str) -> None:
    """Adversarial inputs end (every quantifier is bounded); the timeout is pytest's."""
    for find in (pii.find_emails, pii.find_phones, pii.find_cards, pii.find_ibans):
        find(text)
