"""Webhook signatures agree with an independent implementation of HMAC-SHA256 (`openssl dgst
-hmac`, run as a process over the same bytes), and a receiver's check refuses another secret,
another body, another id and an old timestamp."""

from __future__ import annotations

import subprocess

from llmrelay.jobs.webhooks.signing import signature, signed_content, verify

SECRET = "whsec_ZmFrZS1zZWNyZXQtZm9yLXRlc3RzLW9ubHktMDEyMzQ1Njc4OQ"
BODY = b'{"id":"evt_1","type":"generation.completed","created":1700000000,"data":{"x":"\xc3\xa9"}}'


def openssl_hmac(key: str, data: bytes) -> str:
    done = subprocess.run(
        ["openssl", "dgst", "-sha256", "-hmac", key], input=data, capture_output=True, check=True
    )
    return done.stdout.decode().strip().rsplit("= ", 1)[-1]


def test_the_signature_is_openssls_hmac_of_id_timestamp_and_body() -> None:
    signed = signed_content("evt_1", 1700000000, BODY)
    assert signed == b"evt_1.1700000000." + BODY
    assert signature(SECRET, "evt_1", 1700000000, BODY) == "v1=" + openssl_hmac(SECRET, signed)
    assert signature(SECRET, "evt_1", 1700000000, BODY) != "v1=" + openssl_hmac("whsec_x", signed)


def test_a_receiver_refuses_what_was_not_signed_so() -> None:
    header = signature(SECRET, "evt_1", 1700000000, BODY)
    assert verify(SECRET, "evt_1", 1700000000, BODY, header, now=1700000010)
    assert not verify(SECRET + "x", "evt_1", 1700000000, BODY, header, now=1700000010)
    assert not verify(SECRET, "evt_1", 1700000000, BODY + b" ", header, now=1700000010)
    assert not verify(SECRET, "evt_2", 1700000000, BODY, header, now=1700000010)
    assert not verify(SECRET, "evt_1", 1700000000, BODY, header, now=1700000000 + 301)
    # several signatures in one header (a rotation): any one that matches will do
    assert verify(SECRET, "evt_1", 1700000000, BODY, "v1=00, " + header, now=1700000000)
