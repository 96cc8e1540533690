"""Client attribution behind reverse proxies, and the limit on failed authentication."""

from __future__ import annotations

import pytest
from botweave.ingress import FailedAuthLimit, client_address, parse_address, parse_networks

PROXIES = parse_networks(["10.0.0.0/8", "192.0.2.1", "2001:db8::/32"])


@pytest.mark.parametrize(
    ("peer", "xff", "forwarded", "client"),
    [
        ("203.0.113.5", ["198.51.100.1"], [], "203.0.113.5"),  # not a proxy: headers ignored
        ("10.0.0.2", ["198.51.100.1"], [], "198.51.100.1"),
        ("10.0.0.2", ["6.6.6.6, 198.51.100.1"], [], "198.51.100.1"),  # the client's own entry is left of it
        ("10.0.0.2", ["6.6.6.6", "198.51.100.1, 10.0.0.9"], [], "198.51.100.1"),  # two header lines, two proxies
        ("10.0.0.2", ["10.0.0.3, 10.0.0.9"], [], "10.0.0.3"),  # every hop a proxy: the leftmost
        ("10.0.0.2", ["garbage, 198.51.100.1"], [], "198.51.100.1"),
        ("10.0.0.2", ["198.51.100.1, unknown"], [], "10.0.0.2"),  # a hop nobody vouches for
        ("10.0.0.2", ["198.51.100.1:4711"], [], "198.51.100.1"),
        ("10.0.0.2", [], ['for=198.51.100.1;proto=https, for="[2001:db8::5]:80"'], "198.51.100.1"),
        ("10.0.0.2", [], ['For="[2001:db9::5]:80"'], "2001:db9::5"),
        ("10.0.0.2", [], [], "10.0.0.2"),  # a proxy that forwarded nothing
        ("10.0.0.2", ["198.51.100.1"], ["for=203.0.113.9"], "198.51.100.1"),  # X-Forwarded-For wins
        ("::ffff:10.0.0.2", ["198.51.100.1"], [], "198.51.100.1"),  # IPv4-mapped peer
        (None, ["198.51.100.1"], [], "unknown"),
    ],
)
def test_the_client_is_the_rightmost_hop_that_is_not_a_trusted_proxy(peer, xff, forwarded, client):
    assert client_address(peer, PROXIES, forwarded_for=xff, forwarded=forwarded) == client


def test_without_trusted_proxies_the_peer_is_the_client():
    assert client_address("10.0.0.2", (), forwarded_for=["198.51.100.1"]) == "10.0.0.2"


@pytest.mark.parametrize("text", ["", "unknown", "_hidden", "1.2.3.4.5", "not an ip", '"'])
def test_what_is_not_an_address_is_none(text):
    assert parse_address(text) is None


def test_networks_accept_addresses_ranges_and_one_string():
    assert [str(n) for n in parse_networks("10.0.0.1")] == ["10.0.0.1/32"]
    assert [str(n) for n in parse_networks(["10.1.2.3/8"])] == ["10.0.0.0/8"]  # host bits forgiven
    assert parse_networks(None) == ()
    with pytest.raises(ValueError, match="'example.org' is not an IP address or CIDR range"):
        parse_networks(["example.org"])


def test_failed_authentication_blocks_a_client_for_a_while():
    now = [100.0]
    limit = FailedAuthLimit(max_failures=3, window=60, block=30, clock=lambda: now[0])
    assert [limit.failed("a") for _ in range(3)] == [False, False, True]
    assert limit.refused_for("a") == 30 and limit.refused_for("b") == 0
    now[0] += 31
    assert limit.refused_for("a") == 0


def test_failures_spread_beyond_the_window_do_not_block():
    now = [100.0]
    limit = FailedAuthLimit(max_failures=3, window=60, block=30, clock=lambda: now[0])
    for _ in range(10):
        assert not limit.failed("a")
        now[0] += 31


def test_the_limit_remembers_a_bounded_number_of_clients():
    limit = FailedAuthLimit(max_failures=2, max_tracked=10)
    for n in range(1000):
        limit.failed(f"client-{n}")
    assert len(limit._failures) <= 10
