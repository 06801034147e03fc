"""Durations ("30s", "1h30m") and Kubernetes quantities ("16Gi", "500m") as written in
tau.yaml and policy.yaml.

The spec keeps what the user wrote (so the stored record reads like the file); these
helpers turn it into numbers when a component needs them. The policy package parses its
quotas with the same functions, so a spelling that one file accepts the other does too.
"""

from __future__ import annotations

import math
import re
from decimal import Decimal, InvalidOperation

_DURATION_PART = re.compile(r"(\d+(?:\.\d+)?)(ms|s|m|h|d)", re.ASCII)
_DURATION = re.compile(r"(?:\d+(?:\.\d+)?(?:ms|s|m|h|d))+", re.ASCII)
_UNIT_SECONDS = {"ms": 0.001, "s": 1.0, "m": 60.0, "h": 3600.0, "d": 86400.0}

DURATION_HELP = "a duration such as 30s, 5m, 24h, 1h30m or 500ms (a bare number means seconds)"


def parse_duration(value: str | int) -> float:
    """Seconds in a duration: ``"1h30m"`` -> 5400.0, ``"500ms"`` -> 0.5, ``90`` -> 90.0.

    A bare number (int, or a string of digits) means seconds. Raises ``ValueError`` with
    a message fit to show the user.
    """
    if isinstance(value, bool):  # bool is an int; `timeout: yes` is never meant as 1s
        raise ValueError(f"must be {DURATION_HELP}")
    if isinstance(value, int):
        if value < 0:
            raise ValueError(f"must not be negative; {DURATION_HELP}")
        return float(value)
    if value.isascii() and value.isdigit():
        return float(value)
    if not _DURATION.fullmatch(value):
        raise ValueError(f"{value!r} is not {DURATION_HELP}")
    return sum(float(n) * _UNIT_SECONDS[unit] for n, unit in _DURATION_PART.findall(value))


# Kubernetes resource.Quantity: a decimal number, then a binary (Ki..Ei), decimal (n..E)
# or exponent (e3) suffix.
_QUANTITY = re.compile(
    r"(?P<num>[+-]?(?:\d+(?:\.\d*)?|\.\d+))"
    r"(?P<suffix>Ki|Mi|Gi|Ti|Pi|Ei|[numkMGTPE]|[eE][+-]?\d+)?",
    re.ASCII,
)
_SUFFIX_FACTOR: dict[str, Decimal] = {
    "": Decimal(1),
    "n": Decimal("1e-9"),
    "u": Decimal("1e-6"),
    "m": Decimal("1e-3"),
    "k": Decimal(10) ** 3,
    "M": Decimal(10) ** 6,
    "G": Decimal(10) ** 9,
    "T": Decimal(10) ** 12,
    "P": Decimal(10) ** 15,
    "E": Decimal(10) ** 18,
    "Ki": Decimal(2) ** 10,
    "Mi": Decimal(2) ** 20,
    "Gi": Decimal(2) ** 30,
    "Ti": Decimal(2) ** 40,
    "Pi": Decimal(2) ** 50,
    "Ei": Decimal(2) ** 60,
}

QUANTITY_HELP = "a Kubernetes quantity such as 16Gi, 512Mi or 1G"
CPU_HELP = 'CPU cores such as 4, 0.5 or "500m" (millicores)'


def quantity_value(text: str) -> tuple[Decimal, str]:
    """The number a quantity stands for, and its suffix: ``"2Gi"`` -> (2147483648, "Gi")."""
    match = _QUANTITY.fullmatch(text)
    if match is None:
        raise ValueError(f"{text!r} is not {QUANTITY_HELP}")
    suffix = match["suffix"] or ""
    try:
        number = Decimal(match["num"])
    except InvalidOperation:  # pragma: no cover - the regex only lets numbers through
        raise ValueError(f"{text!r} is not {QUANTITY_HELP}") from None
    if suffix[:1] in ("e", "E") and suffix not in _SUFFIX_FACTOR:  # 1e3, not 1E or 1Ei
        return number * Decimal(10) ** int(suffix[1:]), suffix
    return number * _SUFFIX_FACTOR[suffix], suffix


def quantity_bytes(value: str | int) -> int:
    """Bytes in a memory quantity: ``"16Gi"`` -> 17179869184, ``"1G"`` -> 10**9.

    Rounds a fractional byte count up, as Kubernetes does. Raises ``ValueError`` for
    anything that is not a positive quantity, and for the milli/micro/nano suffixes,
    because ``512m`` means 0.512 *bytes* to Kubernetes and is always a typo for 512Mi.
    """
    if isinstance(value, bool):
        raise ValueError(f"must be {QUANTITY_HELP}")
    if isinstance(value, int):
        if value <= 0:
            raise ValueError(f"must be positive; {QUANTITY_HELP}")
        return value
    number, suffix = quantity_value(value)
    if suffix in ("m", "u", "n"):
        raise ValueError(
            f"{value!r} means {number} bytes; did you mean {value[:-1]}Mi or {value[:-1]}M?"
        )
    if number <= 0:
        raise ValueError(f"{value!r} must be positive; {QUANTITY_HELP}")
    return math.ceil(number)


def cpu_millis(value: str | int | float) -> int:
    """Millicores in a CPU amount, Kubernetes' way: ``"500m"`` -> 500, ``4`` -> 4000,
    ``"1.5"`` -> 1500, ``0.1`` -> 100.

    Zero is allowed here (a policy queue may hold no CPU of a flavor; ``resources.cpus``
    checks for more itself); a fraction of a millicore rounds up, as Kubernetes does.
    Raises ``ValueError`` with a message for the user.
    """
    if isinstance(value, bool):
        raise ValueError(f"must be {CPU_HELP}, got a boolean")
    if isinstance(value, (int, float)):
        if not math.isfinite(value):
            raise ValueError(f"must be {CPU_HELP}, got {value}")
        if value < 0:
            raise ValueError(f"must not be negative, got {value}")
        if isinstance(value, int):
            return value * 1000
        value = repr(value)  # exact decimal arithmetic: 0.1 core is 100m, not 101m
    try:
        number, _ = quantity_value(value)
    except ValueError:
        raise ValueError(f"{value!r} is not {CPU_HELP}") from None
    if number < 0:
        raise ValueError(f"must not be negative, got {value}")
    return math.ceil(number * 1000)
