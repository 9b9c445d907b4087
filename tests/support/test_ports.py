"""free_port's blocks leave out the ports the clients under test refuse to connect to."""

from __future__ import annotations

import itertools

import pytest

from tests.support import ports


def test_the_first_workers_block_leaves_out_10080(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PYTEST_XDIST_WORKER", "gw0")
    block = set(itertools.islice(ports._candidates(), ports.BLOCK))
    assert 10080 not in block
    expected = set(range(ports.FIRST_PORT, ports.FIRST_PORT + ports.BLOCK)) - {10080}
    assert block == expected


def test_no_block_holds_a_port_clients_refuse(monkeypatch: pytest.MonkeyPatch) -> None:
    blocks = (ports.LAST_PORT - ports.FIRST_PORT) // ports.BLOCK
    for worker in range(blocks):
        monkeypatch.setenv("PYTEST_XDIST_WORKER", f"gw{worker}")
        block = set(itertools.islice(ports._candidates(), ports.BLOCK))
        assert not block & ports.REFUSED_BY_CLIENTS
