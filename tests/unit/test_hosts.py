"""The Host allow-list's matching (web/hosts.py): exact names, `name:*` for any port, never a
longer name that merely starts with an allowed one; an Origin must be http(s) on an allowed host."""

from __future__ import annotations

import pytest

from ragmcp.settings import Settings
from ragmcp.web.hosts import host_allowed, origin_allowed

HOSTS, _ = Settings(
    host="127.0.0.1", public_url="https://rag.example", allowed_hosts=["proxy.internal"]
).transport_hosts()


@pytest.mark.parametrize(
    ("host", "allowed"),
    [
        ("localhost", True),
        ("LOCALHOST:8000", True),
        ("127.0.0.1:55123", True),
        ("[::1]:8000", True),
        ("[::1]", True),
        ("rag.example", True),
        ("proxy.internal:443", True),
        ("", False),
        ("attacker.example:8000", False),
        ("localhost.attacker.example", False),
        ("localhost:8000.attacker.example", False),
        ("localhost:80:80", False),
        ("localhost:", False),
        ("127.0.0.2", False),
        ("rag.example.attacker.example", False),
    ],
)
def test_hosts(host: str, allowed: bool) -> None:
    assert host_allowed(host, HOSTS) is allowed


@pytest.mark.parametrize(
    ("origin", "allowed"),
    [
        ("http://localhost:8000", True),
        ("https://rag.example", True),
        ("null", False),
        ("ftp://localhost", False),
        ("https://attacker.example", False),
        ("http://localhost.attacker.example:8000", False),
    ],
)
def test_origins(origin: str, allowed: bool) -> None:
    assert origin_allowed(origin, HOSTS) is allowed


def test_open_mode_allows_loopback_names_only() -> None:
    hosts, _ = Settings(
        host="127.0.0.1", open=True, public_url="https://rag.example", allowed_hosts=["p"]
    ).transport_hosts()
    assert host_allowed("localhost:8000", hosts)
    assert not host_allowed("rag.example", hosts) and not host_allowed("p", hosts)
