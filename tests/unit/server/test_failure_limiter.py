"""The failed-login limiter: per (source, token id), a block that ends, bounded memory."""

from taugrid.server.auth import NO_TOKEN_ID, FailureLimiter, presented_token_id


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def test_ten_failures_in_a_window_block_that_pair_only() -> None:
    clock = Clock()
    lim = FailureLimiter(clock=clock)
    key = ("198.51.100.4", "abc123")
    for _ in range(9):
        lim.failed(key)
        assert lim.blocked_for(key) == 0
    lim.failed(key)
    assert lim.blocked_for(key) == 60.0
    assert lim.blocked_for(("198.51.100.4", "other")) == 0
    assert lim.blocked_for(("203.0.113.9", "abc123")) == 0
    clock.now += 60.5
    assert lim.blocked_for(key) == 0  # the block ends, with a fresh budget
    lim.failed(key)
    assert lim.blocked_for(key) == 0


def test_failures_spread_over_more_than_the_window_do_not_block() -> None:
    clock = Clock()
    lim = FailureLimiter(clock=clock)
    key = ("198.51.100.4", "abc123")
    for _ in range(30):
        lim.failed(key)
        clock.now += 7.0  # ten failures span 63 s
        assert lim.blocked_for(key) == 0


def test_cycling_ids_keeps_the_tables_bounded() -> None:
    lim = FailureLimiter(max_tracked=100)
    for i in range(5000):
        lim.failed(("198.51.100.4", f"id{i}"))
        for _ in range(9 if i % 50 == 0 else 0):
            lim.failed(("198.51.100.4", f"id{i}"))  # some of them blocked
    assert lim.tracked() <= 200


def test_the_presented_token_id() -> None:
    assert presented_token_id("Bearer tau_abc123_secret") == "abc123"
    for header in (None, "", "Bearer garbage", "Basic x", "Bearer tau_", "Bearer tau_a-b_x"):
        assert presented_token_id(header) == NO_TOKEN_ID
