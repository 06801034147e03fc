"""Line charts of logged metrics, drawn on the server as inline SVG strings.

The portal draws its charts here rather than with a JavaScript chart library: the page
needs no script to show them, and they work under the portal's strict
Content-Security-Policy (``style-src 'self'``, no inline script). So the output has no
``style`` attribute, ``<style>`` or ``<script>``: only SVG presentation attributes, and
``class`` names (``chart-axis``, ``chart-grid``, ``chart-line s0``...) for the stylesheet
to restyle. Axes and text are ``currentColor``, so they follow the page's colour scheme.

Series are told apart by colour (a colour-blind-safe palette), dash pattern and marker
shape together, never by colour alone, and a ``<title>``/``<desc>`` pair says in words
what the chart shows. Non-finite values are skipped (and counted), a long series is
downsampled to at most ``MAX_VERTICES`` vertices keeping each bucket's min and max (a
spike stays visible), and the same input always gives the same string.
"""

from __future__ import annotations

import hashlib
import math
import re
from collections.abc import Sequence
from dataclasses import dataclass
from html import escape
from operator import itemgetter

MAX_VERTICES = 1000  # per series polyline
MAX_MARKERS = 60  # per series, evenly subsampled
MAX_ABS = 1e300  # larger magnitudes are skipped with the non-finite (the range would overflow)
LEGEND_CHARS = 40  # a longer label is cut in the legend (the desc keeps it whole)
# Okabe-Ito without yellow and black; 6 colours, 5 dashes, 7 markers: 210 distinct styles.
PALETTE = ("#0072B2", "#D55E00", "#009E73", "#CC79A7", "#E69F00", "#56B4E9")
DASHES = ("", "6 3", "2 2", "8 3 2 3", "4 4")
MARKERS = ("circle", "square", "triangle", "diamond", "triangle-down", "plus", "cross")
_NOT_XML = re.compile("[\x00-\x08\x0b\x0c\x0e-\x1f\ud800-\udfff\ufffe\uffff]")


@dataclass(frozen=True)
class Series:
    label: str  # e.g. "loss" or "run-abc loss"
    points: Sequence[tuple[float, float]]  # (x, y); x is a step (or a time), y the value


def line_chart(
    series: Sequence[Series],
    *,
    title: str,
    x_label: str = "step",
    y_label: str = "",
    width: int = 640,
    height: int = 240,
) -> str:
    """An <svg> element as a string."""
    width, height = max(width, 160), max(height, 100)
    kept: list[list[tuple[float, float]]] = []
    skipped = 0
    for s in series:
        # A NaN fails both comparisons, an inf (or a huge value) the bound.
        good = [
            (float(x), float(y))
            for x, y in s.points
            if -MAX_ABS <= x <= MAX_ABS and -MAX_ABS <= y <= MAX_ABS
        ]
        skipped += len(s.points) - len(good)
        good.sort(key=itemgetter(0))  # stable: equal steps keep their logged order
        kept.append(good)
    total = sum(len(k) for k in kept)
    desc = _describe(series, kept, total, skipped, x_label, y_label)
    # Distinct ids for distinct charts on one page, the same id for the same chart.
    uid = "chart-" + hashlib.sha256(repr((title, desc)).encode()).hexdigest()[:12]
    left, right, top = 56, width - 12, 26 if title else 10
    legend = _legend_layout(series, kept, left, right) if total else []
    under = 22 + (14 if x_label else 0) + 16 * (legend[-1][1] + 1 if legend else 0)
    height = max(height, top + 40 + under)  # a long legend makes the chart taller
    bottom = height - under
    out = [
        f'<svg xmlns="http://www.w3.org/2000/svg" class="chart-svg" role="img" '
        f'width="{width}" height="{height}" viewBox="0 0 {width} {height}" '
        f'aria-labelledby="{uid}-title" aria-describedby="{uid}-desc">',
        f'<title id="{uid}-title">{_esc(title)}</title>',
        f'<desc id="{uid}-desc">{_esc(desc)}</desc>',
    ]
    if title:
        out.append(_text(8, 16, title, "chart-title", size=13))
    if total == 0:
        out.append(_text(width / 2, height / 2, "no points logged yet", "chart-empty", "middle"))
        out.append("</svg>")
        return "".join(out)
    drawn = [k for k in kept if k]  # each sorted by x
    x_lo, x_hi, x_ticks, x_exp = _ticks(min(k[0][0] for k in drawn), max(k[-1][0] for k in drawn))
    y_min = min(min(map(itemgetter(1), k)) for k in drawn)
    y_lo, y_hi, y_ticks, y_exp = _ticks(y_min, max(max(map(itemgetter(1), k)) for k in drawn))
    sx = (right - left) / (x_hi - x_lo)
    sy = (bottom - top) / (y_hi - y_lo)

    def px(x: float) -> float:
        return min(right, max(left, left + (x - x_lo) * sx))

    def py(y: float) -> float:
        return min(bottom, max(top, bottom - (y - y_lo) * sy))

    out.append(
        f'<rect class="chart-plot" x="{left}" y="{top}" width="{right - left}" '
        f'height="{bottom - top}" fill="none" stroke="none"/>'
    )
    grid, labels = [], []
    for v, lab in zip(y_ticks, _tick_labels(y_ticks, y_exp), strict=True):
        y = _c(py(v))
        grid.append(f"M{left} {y}H{right}")
        labels.append(_text(left - 6, float(y) + 3.5, lab, "chart-tick y", "end", size=10))
    for v, lab in zip(x_ticks, _tick_labels(x_ticks, x_exp), strict=True):
        x = _c(px(v))
        grid.append(f"M{x} {top}V{bottom}")
        labels.append(_text(float(x), bottom + 14, lab, "chart-tick x", "middle", size=10))
    out.append(
        f'<path class="chart-grid" d="{"".join(grid)}" stroke="currentColor" '
        'stroke-opacity="0.15" stroke-width="1" fill="none"/>'
    )
    out.append(
        f'<path class="chart-axis" d="M{left} {top}V{bottom}H{right}" stroke="currentColor" '
        'stroke-width="1" fill="none"/>'
    )
    out.extend(labels)
    if x_label:
        out.append(_text((left + right) / 2, bottom + 28, x_label, "chart-label", "middle"))
    if y_label:
        cy = (top + bottom) / 2
        out.append(
            f'<text class="chart-label" x="14" y="{_c(cy)}" font-size="11" '
            f'fill="currentColor" text-anchor="middle" transform="rotate(-90 14 {_c(cy)})">'
            f"{_esc(y_label)}</text>"
        )
    for i, pts in enumerate(kept):
        if not pts:
            continue
        line = " ".join(f"{_c(px(x))},{_c(py(y))}" for x, y in _downsample(pts, MAX_VERTICES))
        out.append(f'<polyline class="chart-line s{i}" points="{line}" {_stroke(i)}/>')
        n, m = len(pts), min(len(pts), MAX_MARKERS)  # evenly spread, first and last included
        chosen = [k * (n - 1) // (m - 1) for k in range(m)] if m > 1 else [0]
        d = "".join(_marker(i, px(pts[j][0]), py(pts[j][1])) for j in chosen)
        out.append(f'<path class="chart-marker s{i}" d="{d}" {_marker_paint(i)}/>')
    out.append('<g class="chart-legend">')
    legend_top = bottom + 22 + (14 if x_label else 0)
    out.extend(_legend_item(i, x, legend_top + 16 * r + 6, lab) for i, r, x, lab in legend)
    out.append("</g></svg>")
    return "".join(out)


def _describe(
    series: Sequence[Series],
    kept: list[list[tuple[float, float]]],
    total: int,
    skipped: int,
    x_label: str,
    y_label: str,
) -> str:
    skip = f" {skipped} non-finite value{'s' if skipped != 1 else ''} skipped." if skipped else ""
    if total == 0:
        return f"Line chart: no points logged yet.{skip}"
    n = len(series)
    parts = [
        f"Line chart of {n} series with {total} point{'s' if total != 1 else ''} in all, "
        f"{y_label or 'value'} against {x_label or 'x'}."
    ]
    for s, pts in zip(series, kept, strict=True):
        if pts:
            x, y = pts[-1]
            parts.append(
                f" {s.label}: {len(pts)} point{'s' if len(pts) != 1 else ''}, "
                f"last value {_num(y)} at {x_label or 'x'} {_num(x)}."
            )
        else:
            parts.append(f" {s.label}: no points.")
    return "".join(parts) + skip


def _ticks(lo: float, hi: float) -> tuple[float, float, list[float], int]:
    """A nice (1, 2 or 5 x 10^k) step over [lo, hi]: (domain lo, domain hi, ticks, k)."""
    span = hi - lo
    if span <= max(abs(lo), abs(hi)) * 1e-9 or span < 1e-200:  # flat: pad around the value
        mid = (lo + hi) / 2
        pad = abs(mid) * 0.1 if abs(mid) >= 1e-200 else 1.0
        lo, hi, span = mid - pad, mid + pad, 2 * pad
    raw = span / 5
    k = math.floor(math.log10(raw))
    m = next(m for m in (1, 2, 5, 10) if m * 10.0**k >= raw * (1 - 1e-12))
    if m == 10:
        m, k = 1, k + 1
    step = m * 10.0**k
    first, last = math.floor(lo / step + 1e-9), math.ceil(hi / step - 1e-9)
    ticks = [i * step if i else 0.0 for i in range(first, last + 1)]
    return min(ticks[0], lo), max(ticks[-1], hi), ticks, k


def _tick_labels(ticks: list[float], k: int) -> list[str]:
    """Compact labels: fixed decimals to the step's precision, or e-notation when big/small."""
    top = max(abs(t) for t in ticks)
    if top >= 1e5 or top < 1e-3:
        digits = max(1, math.floor(math.log10(top)) - k + 1)
        return [f"{t:.{digits}g}" if t else "0" for t in ticks]
    return [f"{t:.{max(0, -k)}f}" if t else "0" for t in ticks]


def _downsample(pts: list[tuple[float, float]], cap: int) -> list[tuple[float, float]]:
    """At most ``cap`` points: each of cap/2 buckets gives its min and max, in order."""
    n = len(pts)
    if n <= cap:
        return pts
    buckets = cap // 2
    ys = [p[1] for p in pts]
    out: list[tuple[float, float]] = []
    for b in range(buckets):
        lo, hi = b * n // buckets, (b + 1) * n // buckets
        bucket = ys[lo:hi]
        i, j = lo + bucket.index(min(bucket)), lo + bucket.index(max(bucket))
        out.extend((pts[i], pts[j]) if i < j else (pts[j], pts[i]) if j < i else (pts[i],))
    return out


def _legend_layout(
    series: Sequence[Series], kept: list[list[tuple[float, float]]], left: int, right: int
) -> list[tuple[int, int, int, str]]:
    """Where each series' legend item goes: (series, row, x, shown label), wrapping rows."""
    items: list[tuple[int, int, int, str]] = []
    row, x = 0, left
    for i, s in enumerate(series):
        label = s.label if len(s.label) <= LEGEND_CHARS else s.label[: LEGEND_CHARS - 1] + "…"
        if not kept[i]:
            label += " (no points)"
        w = 30 + 6 * len(label) + 14  # sample, gap, ~6 px a character at font-size 11
        if x > left and x + w > right:
            row, x = row + 1, left
        items.append((i, row, x, label))
        x += w
    return items


def _legend_item(i: int, x: float, y: float, label: str) -> str:
    """A sample of series ``i``'s line and marker, then its label, centred on height y."""
    return (
        f'<g class="chart-legend-item s{i}">'
        f'<path class="chart-line s{i}" d="M{_c(x)} {_c(y)}h24" {_stroke(i)}/>'
        f'<path class="chart-marker s{i}" d="{_marker(i, x + 12, y)}" {_marker_paint(i)}/>'
        + _text(x + 30, y + 4, label, "chart-legend-label")
        + "</g>"
    )


def _stroke(i: int) -> str:
    dash = DASHES[i % len(DASHES)]
    dash_attr = f' stroke-dasharray="{dash}"' if dash else ""
    return f'fill="none" stroke="{PALETTE[i % len(PALETTE)]}" stroke-width="1.5"{dash_attr}'


def _marker_paint(i: int) -> str:
    colour = PALETTE[i % len(PALETTE)]
    return f'fill="{colour}" stroke="{colour}" stroke-width="1"'


def _marker(i: int, x: float, y: float) -> str:
    """Path data of series ``i``'s marker shape centred on (x, y)."""
    shape, r = MARKERS[i % len(MARKERS)], 3
    if shape == "circle":
        return f"M{_c(x - r)} {_c(y)}a{r} {r} 0 1 0 {2 * r} 0a{r} {r} 0 1 0 {-2 * r} 0"
    if shape == "square":
        return f"M{_c(x - r)} {_c(y - r)}h{2 * r}v{2 * r}h{-2 * r}z"
    if shape == "triangle":
        return f"M{_c(x)} {_c(y - r)}L{_c(x + r)} {_c(y + r)}H{_c(x - r)}z"
    if shape == "triangle-down":
        return f"M{_c(x)} {_c(y + r)}L{_c(x + r)} {_c(y - r)}H{_c(x - r)}z"
    if shape == "diamond":
        return f"M{_c(x)} {_c(y - r)}L{_c(x + r)} {_c(y)}L{_c(x)} {_c(y + r)}L{_c(x - r)} {_c(y)}z"
    if shape == "plus":
        return f"M{_c(x - r)} {_c(y)}h{2 * r}M{_c(x)} {_c(y - r)}v{2 * r}"
    return f"M{_c(x - r)} {_c(y - r)}l{2 * r} {2 * r}M{_c(x - r)} {_c(y + r)}l{2 * r} {-2 * r}"


def _text(x: float, y: float, s: str, cls: str, anchor: str = "start", *, size: int = 11) -> str:
    anchor_attr = f' text-anchor="{anchor}"' if anchor != "start" else ""
    return (
        f'<text class="{cls}" x="{_c(x)}" y="{_c(y)}" font-size="{size}" '
        f'fill="currentColor"{anchor_attr}>{_esc(s)}</text>'
    )


def _esc(s: str) -> str:
    return escape(_NOT_XML.sub("\ufffd", s), quote=True)


def _num(v: float) -> str:
    return str(int(v)) if v.is_integer() and abs(v) < 1e7 else f"{v:.4g}"


def _c(v: float) -> str:
    """A coordinate to 1 decimal place, without a trailing ``.0``."""
    s = f"{v:.1f}"
    return s[:-2] if s.endswith(".0") else s
