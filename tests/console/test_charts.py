"""The SVG geometry of the charts: round ticks from zero, gaps left out, every series in its
own colour (a lone point too), dates on week-long axes, empty states, hover readouts."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from llmrelay.console.charts import PLOT_H, chart, fmt, nice_scale, tick_text

START = datetime(2026, 12, 1, tzinfo=UTC)


def hours(n: int, start: datetime = START) -> list[datetime]:
    return [start + timedelta(hours=i) for i in range(n)]


def test_lines_scale_to_a_round_top_and_skip_gaps() -> None:
    drawn = chart("Latency", "ms", hours(3), "hour", [("p50", [10.0, None, 30.0])])
    (line,) = drawn.lines
    assert len(line.points.split()) == 2  # the gap is not drawn as zero
    assert [t.text for t in drawn.y_ticks] == ["0 ms", "10 ms", "20 ms", "30 ms"]
    assert line.last == "30 ms"
    assert not drawn.empty
    assert line.dots == ((1.5, line.dots[0][1]), (98.5, line.dots[1][1]))  # both alone


@pytest.mark.parametrize(
    ("top", "unit", "labels"),
    [
        (0.8, "", ["0", "0.2", "0.4", "0.6", "0.8"]),
        (0.0063, "$", ["$0", "$0.002", "$0.004", "$0.006", "$0.008"]),
        (37, "", ["0", "10", "20", "30", "40"]),
        (42, "", ["0", "10", "20", "30", "40", "50"]),  # not 0..80
        (9, "%", ["0%", "2%", "4%", "6%", "8%", "10%"]),
        (120_000, "", ["0", "25k", "50k", "75k", "100k", "125k"]),
    ],
)
def test_ticks_are_round(top: float, unit: str, labels: list[str]) -> None:
    step, intervals = nice_scale(top)
    assert [tick_text(step * k, step, unit) for k in range(intervals + 1)] == labels


def test_counts_tick_in_whole_numbers() -> None:
    drawn = chart("Requests", "", hours(2), "hour", [("requests", [1.0, 0.0])], whole=True)
    assert [t.text for t in drawn.y_ticks] == ["0", "1"]  # never 0.25, 0.5


def test_every_series_keeps_its_colour_a_lone_point_too() -> None:
    drawn = chart(
        "Latency", "ms", hours(3), "hour", [("p50", [None, 5.0, None]), ("p95", [None, 9.0, None])]
    )
    assert [(line.name, line.colour, len(line.dots)) for line in drawn.lines] == [
        ("p50", 0, 1),
        ("p95", 1, 1),
    ]


def test_a_week_is_labelled_with_dates_a_day_with_hours() -> None:
    week = chart("Requests", "", hours(7 * 24), "hour", [("requests", [1.0] * 168)])
    assert [t.text for t in week.x_ticks][:3] == ["Dec 01", "Dec 02", "Dec 03"]
    assert week.x_ticks[0].anchor == "middle"
    day = chart("Requests", "", hours(24), "hour", [("requests", [1.0] * 24)])
    assert day.x_ticks[0].text == "00:00" and all(":00" in t.text for t in day.x_ticks)
    last = day.x_ticks[-1]
    assert last.anchor in ("middle", "end") and last.at <= 100  # never cut off


def test_zeros_and_gaps_only_say_empty() -> None:
    for values in ([None, None], [0.0, 0.0]):
        drawn = chart("Requests", "", hours(2), "hour", [("requests", values)])
        assert drawn.empty
        assert all(0 <= t.at <= PLOT_H for t in drawn.y_ticks)


def test_each_bucket_has_a_readout() -> None:
    drawn = chart("Requests", "", hours(2), "hour", [("requests", [3.0, 4.0]), ("errors", [0, 1])])
    assert [c.text for c in drawn.columns] == [
        "Dec 01 00:00 UTC: requests 3, errors 0",
        "Dec 01 01:00 UTC: requests 4, errors 1",
    ]
    assert [c.anchor for c in drawn.columns] == ["start", "end"]


def test_figures_as_the_page_shows_them() -> None:
    assert fmt(None) == "-"
    assert fmt(12_500) == "12.5k"
    assert fmt(3_200_000) == "3.2M"
    assert fmt(0.0123, "$") == "$0.0123"
    assert fmt(12.34, "%") == "12.3%"
