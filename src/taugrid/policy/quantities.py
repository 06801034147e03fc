"""Quota amounts as written in policy.yaml, and as Kubernetes quantities for Kueue.

The policy keeps what the platform team wrote (``"500m"``, ``"64Gi"``); these helpers
turn it into the integers the scheduler counts in (CPU millicores, memory bytes) and back
into canonical quantity strings for the rendered objects, so both modes read one number.
Parsing reuses the spec package's Kubernetes-quantity grammar.
"""

from __future__ import annotations

import math
from decimal import Decimal

# The spec package's parsers of the quantity grammar; they are shared rather than
# duplicated so tau.yaml and policy.yaml accept exactly the same spellings (a run's
# ``resources.cpus: 500m`` and a queue's ``cpu: 500m`` are one amount).
from taugrid.spec.units import CPU_HELP, QUANTITY_HELP, cpu_millis, quantity_bytes, quantity_value

__all__ = [
    "CPU_HELP",
    "MEMORY_HELP",
    "cpu_millis",
    "format_cpu",
    "format_memory",
    "gpu_count",
    "memory_bytes",
]

MEMORY_HELP = QUANTITY_HELP

_BINARY = (("Ei", 2**60), ("Pi", 2**50), ("Ti", 2**40), ("Gi", 2**30), ("Mi", 2**20), ("Ki", 2**10))
_DECIMAL = (("E", 10**18), ("P", 10**15), ("T", 10**12), ("G", 10**9), ("M", 10**6), ("k", 10**3))
_EXA = (("Ei", Decimal(2**60)), ("E", Decimal(10**18)))


def _value(text: str) -> tuple[Decimal, str]:
    """The quantity's number and suffix.

    The shared parser reads the exa suffixes (``E``, ``Ei``) as the start of an exponent
    and fails on them; they are valid quantities, so they are split off here first.
    """
    for suffix, factor in _EXA:
        head = text[: -len(suffix)]
        if text.endswith(suffix) and head[-1:] in tuple("0123456789."):
            number, rest = quantity_value(head)
            if not rest:
                return number * factor, suffix
    return quantity_value(text)


def memory_bytes(value: str | int) -> int:
    """Bytes in a memory amount: ``"64Gi"`` -> 68719476736; zero is allowed.

    The ``m``/``u``/``n`` suffixes are refused as in tau.yaml (``512m`` is half a byte to
    Kubernetes, and always a typo for ``512Mi``).
    """
    if isinstance(value, bool):
        raise ValueError(f"must be {MEMORY_HELP}, got a boolean")
    if isinstance(value, int):
        if value < 0:
            raise ValueError(f"must not be negative, got {value}")
        return value
    number, suffix = _value(value)
    if suffix in ("m", "u", "n"):
        quantity_bytes(value)  # raises the spec package's "did you mean 512Mi?" message
    if number < 0:
        raise ValueError(f"must not be negative, got {value}")
    return math.ceil(number)


def gpu_count(value: int) -> int:
    if value < 0:
        raise ValueError(f"must not be negative, got {value}")
    return value


def format_cpu(millis: int) -> str:
    """Canonical CPU quantity: 4000 -> ``"4"``, 1500 -> ``"1500m"``."""
    return str(millis // 1000) if millis % 1000 == 0 else f"{millis}m"


def format_memory(size: int) -> str:
    """The shortest exact quantity for a byte count: ``"64Gi"``, ``"64G"``, ``"1536Mi"``."""
    candidates = [str(size)]
    if size > 0:
        for suffix, factor in (*_BINARY, *_DECIMAL):
            if size % factor == 0:
                candidates.append(f"{size // factor}{suffix}")
    return min(candidates, key=len)  # min keeps the first of equal length: binary first
