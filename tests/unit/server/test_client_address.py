"""Which address a request comes from: X-Forwarded-For counts only from trusted proxies."""

import pytest

from taugrid.errors import UsageError
from taugrid.server.client_address import client_address, parse_trusted_proxies

PROXIES = parse_trusted_proxies(["10.0.0.0/8", "192.0.2.7, ::1"])


def test_without_trusted_proxies_the_header_is_ignored() -> None:
    assert client_address("198.51.100.4", ["203.0.113.9"], ()) == "198.51.100.4"


def test_a_peer_that_is_not_a_trusted_proxy_cannot_forward() -> None:
    assert client_address("198.51.100.4", ["203.0.113.9"], PROXIES) == "198.51.100.4"


def test_the_right_most_untrusted_address_is_the_client() -> None:
    # The client wrote "1.1.1.1" itself; the proxies appended the rest.
    chain = ["1.1.1.1, 203.0.113.9", "10.1.2.3"]
    assert client_address("192.0.2.7", chain, PROXIES) == "203.0.113.9"
    assert client_address("192.0.2.7", ["203.0.113.9"], PROXIES) == "203.0.113.9"


def test_all_hops_trusted_gives_the_left_most_and_no_header_gives_the_peer() -> None:
    assert client_address("192.0.2.7", ["10.0.0.5, 10.0.0.6"], PROXIES) == "10.0.0.5"
    assert client_address("192.0.2.7", [], PROXIES) == "192.0.2.7"


def test_an_entry_that_is_no_address_stops_at_the_hop_that_wrote_it() -> None:
    assert client_address("192.0.2.7", ["<script>, 10.0.0.5"], PROXIES) == "10.0.0.5"
    assert client_address("192.0.2.7", ["unknown"], PROXIES) == "192.0.2.7"


def test_ports_brackets_and_mapped_addresses() -> None:
    assert client_address("::1", ["[2001:db8::5]:443"], PROXIES) == "2001:db8::5"
    assert client_address("::1", ["203.0.113.9:5555"], PROXIES) == "203.0.113.9"
    assert client_address("::ffff:192.0.2.7", ["203.0.113.9"], PROXIES) == "203.0.113.9"
    assert client_address(None, ["203.0.113.9"], PROXIES) == "unknown"


def test_bad_proxy_values_are_usage_errors() -> None:
    with pytest.raises(UsageError, match="not an address or network"):
        parse_trusted_proxies(["10.0.0.0/33"])
    assert parse_trusted_proxies([]) == ()
