import ipaddress
import re

import pytest

from llmrelay.gateway.ingress import choose_request_id, client_ip

TRUSTED = (ipaddress.ip_network("10.0.0.0/8"), ipaddress.ip_network("127.0.0.1/32"))


@pytest.mark.parametrize("given", [b"abc", b"A-b_9", b"x" * 64])
def test_well_formed_client_request_ids_are_kept(given: bytes) -> None:
    assert choose_request_id(given) == given.decode()


@pytest.mark.parametrize(
    "given", [None, b"", b"x" * 65, b"has space", b"semi;colon", b"\xff\xfe", b"a/b"]
)
def test_anything_else_gets_a_fresh_unguessable_id(given: bytes | None) -> None:
    first, second = choose_request_id(given), choose_request_id(given)
    assert first != second
    assert re.fullmatch(r"req_[0-9a-f]{24}", first)


def test_forwarded_for_is_ignored_from_untrusted_peers() -> None:
    assert client_ip("203.0.113.9", b"1.2.3.4", TRUSTED) == "203.0.113.9"
    assert client_ip("10.1.1.1", b"1.2.3.4", ()) == "10.1.1.1"


def test_forwarded_for_from_a_trusted_proxy_gives_the_first_untrusted_hop() -> None:
    assert client_ip("10.1.1.1", b"1.2.3.4", TRUSTED) == "1.2.3.4"
    # A client cannot spoof by prepending: we walk from the right and stop at the first
    # address our proxies did not vouch for.
    assert client_ip("10.1.1.1", b"6.6.6.6, 1.2.3.4, 10.2.2.2", TRUSTED) == "1.2.3.4"
    assert client_ip("127.0.0.1", b"10.0.0.5", TRUSTED) == "10.0.0.5"


def test_garbage_in_forwarded_for_is_not_believed() -> None:
    assert client_ip("10.1.1.1", b"not-an-ip", TRUSTED) == "10.1.1.1"
    assert client_ip("10.1.1.1", b"1.2.3.4, bogus", TRUSTED) == "10.1.1.1"
