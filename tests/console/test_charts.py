"""The SVG geometry of the charts: axis from zero to a round top, gaps left out."""

from __future__ import annotations

from llmrelay.console.charts import HEIGHT, chart, fmt


def test_lines_scale_to_a_round_top_and_skip_gaps() -> None:
    drawn = chart("Latency", "ms", ["a", "b", "c"], [("p50", [10.0, None, 30.0])])
    (line,) = drawn.lines
    assert len(line.dots) == 2  # the gap is not drawn as zero
    assert drawn.y_ticks[-1][1] == "40 ms"  # the top: the next round figure above 30
    (_, top_y), (_, low_y) = line.dots[1], line.dots[0]
    assert top_y < low_y  # higher values higher up
    assert line.last == "30 ms"
    assert not drawn.empty


def test_an_empty_window_says_so() -> None:
    drawn = chart("Requests", "", ["a", "b"], [("requests", [None, None])])
    assert drawn.empty
    assert all(0 <= y <= HEIGHT for y, _ in drawn.y_ticks)


def test_figures_as_the_page_shows_them() -> None:
    assert fmt(None) == "-"
    assert fmt(12_500) == "12.5k"
    assert fmt(3_200_000) == "3.2M"
    assert fmt(0.0123, "$") == "$0.0123"
    assert fmt(12.34, "%") == "12.3%"
