import ipaddress
import os
import re

import pytest

from llmrelay.gateway.ingress import choose_request_id, client_ip

TRUSTED = (ipaddress.ip_network("10.0.0.0/8"), ipaddress.ip_network("127.0.0.1/32"))


@pytest.mark.parametrize("given", [b"abc", b"A-b_9", b"x" * 64])
def test_well_formed_client_request_ids_are_kept(given: bytes) -> None:
    assert choose_request_id(given) == given.decode()


@pytest.mark.parametrize(
    "given",
    [
        None,
        b"",
        b"x" * 65,
        b"has space",
        b"semi;colon",
        b"\xff\xfe",
        b"a/b",
        b"abc\n",  # `$` alone would let a final line feed through into the response header
        b"abc\r\nSet-Cookie: x=1",
    ],
)
def test_anything_else_gets_a_fresh_unguessable_id(given: bytes | None) -> None:
    first, second = choose_request_id(given), choose_request_id(given)
    assert first != second
    assert re.fullmatch(r"req_[0-9a-f]{32}", first)


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


def test_fresh_ids_are_ordered_by_time_and_do_not_repeat() -> None:
    ids = [choose_request_id(None) for _ in range(5000)]  # crosses several buffer refills
    assert len(set(ids)) == 5000
    assert [i[:16] for i in ids] == sorted(i[:16] for i in ids)
    assert len({i[16:] for i in ids}) == 5000  # the random part alone is unique


def test_a_forked_child_does_not_reuse_the_parents_randomness() -> None:
    choose_request_id(None)  # the parent has a buffer now
    read_end, write_end = os.pipe()
    pid = os.fork()
    if pid == 0:  # child
        os.write(write_end, choose_request_id(None)[16:].encode())
        os._exit(0)
    os.close(write_end)
    child_random = os.read(read_end, 100).decode()
    os.waitpid(pid, 0)
    parent_random = choose_request_id(None)[16:]
    assert child_random != parent_random
