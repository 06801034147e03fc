"""Code tokens: read-only, expiring, bound to one digest, forgery-proof (pure)."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from taugrid.domain.code_tokens import CodeClaims, issue, verify

KEY = b"k" * 32
D = "a" * 64


def test_a_token_names_its_digest_run_and_attempt_until_it_expires() -> None:
    token = issue(KEY, D, "train-x7k2p", 3, now=1000.0, ttl_s=60)
    assert verify(KEY, token, D, now=1059.0) == CodeClaims(D, "train-x7k2p", 3, 1060.0)
    assert verify(KEY, token, D, now=1060.0) is None  # expired
    assert verify(KEY, token, "b" * 64, now=1000.0) is None  # another snapshot
    assert verify(b"other key", token, D, now=1000.0) is None


@given(st.integers(min_value=0, max_value=200), st.sampled_from("AZaz09-_."))
def test_any_changed_character_is_refused(at: int, char: str) -> None:
    token = issue(KEY, D, "r", 0, now=0.0)
    at %= len(token)
    forged = token[:at] + char + token[at + 1 :]
    if forged != token:
        assert verify(KEY, forged, D, now=1.0) is None


def test_garbage_is_refused_not_raised() -> None:
    for junk in ("", "tau-code.", "tau-code..", "tau-code.e30.x", "Bearer x", "tau-code.!!!.abc"):
        assert verify(KEY, junk, D, now=0.0) is None


def test_a_report_token_names_one_attempt_and_is_no_code_token() -> None:
    from taugrid.domain.code_tokens import issue_report, verify_report

    report = issue_report(KEY, "train-x7k2p", 1, now=1000.0, ttl_s=60)
    assert verify_report(KEY, report, "train-x7k2p", 1, now=1059.0)
    assert not verify_report(KEY, report, "train-x7k2p", 1, now=1060.0)  # expired
    assert not verify_report(KEY, report, "train-x7k2p", 0, now=1000.0)  # another attempt
    assert not verify_report(KEY, report, "other-run", 1, now=1000.0)
    assert not verify_report(b"other key", report, "train-x7k2p", 1, now=1000.0)
    # Neither kind passes for the other, even with the prefix swapped by hand.
    code = issue(KEY, D, "train-x7k2p", 1, now=1000.0)
    assert not verify_report(KEY, code, "train-x7k2p", 1, now=1000.0)
    assert not verify_report(
        KEY, "tau-report." + code[len("tau-code.") :], "train-x7k2p", 1, 1000.0
    )
    assert verify(KEY, "tau-code." + report[len("tau-report.") :], D, now=1000.0) is None
