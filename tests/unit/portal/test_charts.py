"""The portal's SVG line charts: well-formed, accessible, CSP-safe, and drawn where they should."""

from __future__ import annotations

import math
import xml.etree.ElementTree as ET

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from taugrid.server.portal.charts import MAX_MARKERS, MAX_VERTICES, Series, line_chart

NS = "{http://www.w3.org/2000/svg}"


def parse(svg: str) -> ET.Element:
    root = ET.fromstring(svg)
    assert root.tag == f"{NS}svg"
    return root


def polylines(root: ET.Element) -> list[ET.Element]:
    return list(root.iter(f"{NS}polyline"))


def vertices(line: ET.Element) -> list[tuple[float, float]]:
    pairs = line.attrib["points"].split()
    return [(float(x), float(y)) for x, y in (p.split(",") for p in pairs)]


def plot_box(root: ET.Element) -> tuple[float, float, float, float]:
    (rect,) = [r for r in root.iter(f"{NS}rect") if r.get("class") == "chart-plot"]
    x, y = float(rect.attrib["x"]), float(rect.attrib["y"])
    return x, y, x + float(rect.attrib["width"]), y + float(rect.attrib["height"])


def texts(root: ET.Element, cls: str) -> list[str]:
    return [t.text or "" for t in root.iter(f"{NS}text") if t.get("class") == cls]


def ticks(root: ET.Element, axis: str) -> list[str]:
    return texts(root, f"chart-tick {axis}")


def desc(root: ET.Element) -> str:
    element = root.find(f"{NS}desc")
    assert element is not None
    return element.text or ""


def by_class(root: ET.Element, cls: str) -> list[ET.Element]:
    return [e for e in root.iter() if e.get("class") == cls]


def test_the_svg_is_labelled_by_its_title_and_described_in_words() -> None:
    root = parse(
        line_chart(
            [Series("loss", [(0, 2.0), (1, 1.0), (2, 0.5)]), Series("acc", [(0, 0.1), (2, 0.9)])],
            title="Training",
        )
    )
    assert root.get("role") == "img"
    title = root.find(f"{NS}title")
    assert title is not None and title.text == "Training"
    assert root.get("aria-labelledby") == title.get("id")
    element = root.find(f"{NS}desc")
    assert element is not None and root.get("aria-describedby") == element.get("id")
    words = desc(root)
    assert "2 series" in words and "5 points" in words
    assert "loss: 3 points, last value 0.5 at step 2" in words
    assert "acc: 2 points, last value 0.9 at step 2" in words


def test_one_polyline_per_series_with_points_and_a_legend_item_per_series() -> None:
    root = parse(
        line_chart(
            [
                Series("a", [(0, 1.0), (1, 2.0)]),
                Series("empty", []),
                Series("all nan", [(0, math.nan)]),
                Series("b", [(0, 3.0)]),
            ],
            title="t",
        )
    )
    assert [p.get("class") for p in polylines(root)] == ["chart-line s0", "chart-line s3"]
    assert texts(root, "chart-legend-label") == [
        "a",
        "empty (no points)",
        "all nan (no points)",
        "b",
    ]


def test_a_higher_value_is_drawn_higher_and_a_later_step_further_right() -> None:
    root = parse(line_chart([Series("v", [(0, 1.0), (10, 5.0), (20, -3.0)])], title="t"))
    (first, second, third) = vertices(polylines(root)[0])
    assert second[1] < first[1] < third[1]
    assert first[0] < second[0] < third[0]


def test_points_are_drawn_in_step_order_whatever_order_they_came_in() -> None:
    root = parse(line_chart([Series("v", [(2, 1.0), (0, 3.0), (1, 2.0)])], title="t"))
    xs = [x for x, _ in vertices(polylines(root)[0])]
    assert xs == sorted(xs)


def test_series_differ_in_colour_dash_and_marker_shape_and_the_legend_matches() -> None:
    # The same points for all: each draws its markers at the same places, so only shape differs.
    series = [Series(f"s{i}", [(0, 1.0), (1, 2.0)]) for i in range(5)]
    root = parse(line_chart(series, title="t"))
    lines = polylines(root)
    assert len({line.get("stroke") for line in lines}) == 5
    assert len({line.get("stroke-dasharray") for line in lines}) == 5
    assert len({by_class(root, f"chart-marker s{i}")[0].attrib["d"] for i in range(5)}) == 5
    for i, line in enumerate(lines):
        chart_line, legend_line = by_class(root, f"chart-line s{i}")
        assert chart_line is line
        assert legend_line.get("stroke") == line.get("stroke")
        assert legend_line.get("stroke-dasharray") == line.get("stroke-dasharray")
        assert len(by_class(root, f"chart-marker s{i}")) == 2  # on the line and in the legend


def test_user_text_is_escaped() -> None:
    evil = "<script>alert(\"x\")</script> & 'quote'"
    svg = line_chart([Series(evil, [(0, 1.0), (1, 2.0)])], title=evil, x_label=evil, y_label=evil)
    assert "<script" not in svg
    root = parse(svg)
    assert not [e for e in root.iter() if e.tag.endswith("script")]
    assert evil in texts(root, "chart-legend-label")
    assert texts(root, "chart-title") == [evil]
    assert evil in desc(root)


def test_characters_xml_cannot_carry_are_replaced_not_emitted() -> None:
    root = parse(line_chart([Series("a\x00b\x1b", [(0, 1.0)])], title="t\x07"))
    assert texts(root, "chart-legend-label") == ["a\ufffdb\ufffd"]


@pytest.mark.parametrize(
    "series",
    [[], [Series("loss", [])], [Series("loss", [(0, math.nan), (1, math.inf), (2, -math.inf)])]],
)
def test_no_points_says_so(series: list[Series]) -> None:
    root = parse(line_chart(series, title="loss"))
    assert texts(root, "chart-empty") == ["no points logged yet"]
    assert "no points logged yet" in desc(root)
    assert polylines(root) == []


def test_non_finite_values_are_skipped_and_counted() -> None:
    points = [(0, 1.0), (1, math.nan), (2, 2.0), (math.inf, 3.0), (3, -math.inf), (4, 0.5)]
    root = parse(line_chart([Series("loss", points)], title="t"))
    assert len(vertices(polylines(root)[0])) == 3
    assert "3 non-finite values skipped" in desc(root)
    assert "loss: 3 points, last value 0.5 at step 4" in desc(root)


def test_a_single_point_is_drawn_inside_the_plot() -> None:
    root = parse(line_chart([Series("loss", [(7, 0.25)])], title="t"))
    ((x, y),) = vertices(polylines(root)[0])
    left, top, right, bottom = plot_box(root)
    assert left < x < right and top < y < bottom
    assert by_class(root, "chart-marker s0")
    assert len(ticks(root, "x")) >= 2 and len(ticks(root, "y")) >= 2


@pytest.mark.parametrize("value", [0.0, 3.0, -1e-7, 1e9])
def test_a_flat_series_is_padded_not_divided_by_zero(value: float) -> None:
    root = parse(line_chart([Series("v", [(i, value) for i in range(5)])], title="t"))
    ys = {y for _, y in vertices(polylines(root)[0])}
    _, top, _, bottom = plot_box(root)
    assert len(ys) == 1 and top < ys.pop() < bottom
    labels = ticks(root, "y")
    assert len(labels) >= 2 and len(set(labels)) == len(labels)


def test_negative_values_get_negative_ticks() -> None:
    root = parse(line_chart([Series("v", [(0, -40.0), (1, -10.0), (2, 15.0)])], title="t"))
    values = [float(t) for t in ticks(root, "y")]
    assert min(values) <= -40 and max(values) >= 15 and 0 in values


def test_ticks_are_nice_and_compact() -> None:
    root = parse(line_chart([Series("v", [(200_000, 0.0), (1_200_000, 0.0031)])], title="t"))
    assert ticks(root, "y") == ["0", "0.001", "0.002", "0.003", "0.004"]
    assert ticks(root, "x") == ["2e+05", "4e+05", "6e+05", "8e+05", "1e+06", "1.2e+06"]


def test_many_points_are_downsampled_keeping_the_spikes() -> None:
    def points(k: int) -> list[tuple[float, float]]:
        ys = [0.5 + 0.4 * math.sin(i / 100 + k) for i in range(10_000)]
        ys[3001], ys[7003] = 100.0, -100.0
        return [(float(i), y) for i, y in enumerate(ys)]

    root = parse(line_chart([Series(f"s{k}", points(k)) for k in range(4)], title="t"))
    _, top, _, bottom = plot_box(root)
    lines = polylines(root)
    assert len(lines) == 4
    for line in lines:
        pts = vertices(line)
        assert 100 < len(pts) <= MAX_VERTICES
        assert [x for x, _ in pts] == sorted(x for x, _ in pts)
        # the axis runs -100 .. 100, so the spikes touch the top and the bottom of the plot
        assert min(y for _, y in pts) == top and max(y for _, y in pts) == bottom
    assert by_class(root, "chart-marker s0")[0].attrib["d"].count("M") == MAX_MARKERS


@pytest.mark.parametrize(
    "series",
    [
        [],
        [Series("a", [(0, 1.0)])],
        [Series(f"s{i}", [(j, float(i * j)) for j in range(30)]) for i in range(9)],
    ],
)
def test_nothing_a_strict_csp_would_block(series: list[Series]) -> None:
    root = parse(line_chart(series, title="t", y_label="y"))
    for element in root.iter():
        assert "style" not in element.attrib
        assert element.tag not in (f"{NS}style", f"{NS}script", f"{NS}foreignObject")
        assert not [a for a in element.attrib if a.startswith("on")]


def test_the_same_input_gives_the_same_string_and_other_charts_other_ids() -> None:
    series = [Series("loss", [(0, 1.0), (1, 0.5)])]
    assert line_chart(series, title="a") == line_chart(list(series), title="a")
    ids = {parse(line_chart(series, title=t)).get("aria-labelledby") for t in ("a", "b")}
    assert len(ids) == 2


def test_a_long_legend_wraps_and_the_chart_grows_to_hold_it() -> None:
    series = [Series(f"a rather long run label number {i}", [(0, float(i))]) for i in range(12)]
    root = parse(line_chart(series, title="t", width=400, height=200))
    assert int(root.attrib["height"]) > 200
    assert root.attrib["viewBox"] == f"0 0 400 {root.attrib['height']}"


finite = st.floats(min_value=-1e300, max_value=1e300, allow_nan=False, allow_infinity=False)


@settings(deadline=None)
@given(
    st.lists(
        st.tuples(st.text(max_size=20), st.lists(st.tuples(finite, finite), max_size=40)),
        max_size=4,
    ),
    st.text(max_size=30),
)
def test_any_finite_points_give_well_formed_svg_inside_the_plot(
    data: list[tuple[str, list[tuple[float, float]]]], title: str
) -> None:
    svg = line_chart([Series(label, points) for label, points in data], title=title)
    root = parse(svg)
    lines = polylines(root)
    assert len(lines) == sum(1 for _, points in data if points)
    if lines:
        left, top, right, bottom = plot_box(root)
        for line in lines:
            for x, y in vertices(line):
                assert left <= x <= right and top <= y <= bottom
