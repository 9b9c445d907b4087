"""Time-series charts as inline SVG, drawn on the server (they work without JavaScript; the
dashboard's script only fetches them again). Geometry only: the template draws the shapes,
and the colours come from the stylesheet (no inline style: the CSP allows none).

The chart keeps its text the size of the page's text at any width: the SVG is as wide as its
box with no viewBox, so x positions are percentages of the plot's width and y positions are
pixels; only the lines are drawn in a stretched viewBox (with strokes that do not stretch).
Each bucket is a hover target that shows its time and values (CSS, no script), and has them
as its tooltip."""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta

#: Pixel height of the plot area and of the whole chart (the x labels below the plot).
PLOT_H = 160
HEIGHT = PLOT_H + 22
#: Width of the y axis' labels beside the plot.
AXIS_W = 56
#: The viewBox width the lines are drawn in (stretched to the plot's real width).
LINE_W = 1000
#: Space kept free above the top tick, for the hover readout (pixels).
_TOP = 18
#: Horizontal inset of the first and last points (a percentage of the plot's width).
_INSET = 1.5


@dataclass(frozen=True, slots=True)
class Line:
    name: str
    #: Its colour's index in the stylesheet (s0, s1, s2), the legend's as well.
    colour: int
    points: str  # "x,y x,y ..." in the LINE_W x PLOT_H viewBox, for <polyline>
    last: str  # the latest value, for the legend
    #: (x %, y px) of the points a line cannot show (one alone, between gaps).
    dots: tuple[tuple[float, float], ...]


@dataclass(frozen=True, slots=True)
class Column:
    """One bucket's hover target: where it is, what it says."""

    x: float  # % of the plot's width: its point
    left: float  # %: where the target starts
    width: float  # %
    text: str
    #: The readout's anchor: start on the left half, end on the right (never clipped).
    anchor: str


@dataclass(frozen=True, slots=True)
class Tick:
    at: float  # x: % of the plot's width; y: px
    text: str
    anchor: str = "middle"


@dataclass(frozen=True, slots=True)
class Chart:
    title: str
    unit: str
    lines: tuple[Line, ...]
    y_ticks: tuple[Tick, ...]
    x_ticks: tuple[Tick, ...]
    columns: tuple[Column, ...]
    empty: bool
    #: What an empty chart says.
    empty_text: str = "No requests in this window"
    plot_h: int = PLOT_H
    height: int = HEIGHT
    axis_w: int = AXIS_W
    line_w: int = LINE_W


def nice_scale(top: float, most: int = 5, *, whole: bool = False) -> tuple[float, int]:
    """A round step (1, 2, 2.5 or 5 times a power of ten) and how many of them reach `top`:
    the smallest such step that needs at most `most` intervals (so 42 is drawn to 50 in
    steps of 10, not to 80). `whole`: counts, whose steps are whole numbers."""
    if top <= 0 or not math.isfinite(top):
        return 1.0, 4
    power = 10 ** math.floor(math.log10(top / most))
    for scale in (1, 10, 100):
        for factor in (1.0, 2.0, 2.5, 5.0):
            step = factor * power * scale
            if whole and (step < 1 or step != int(step)):
                continue
            intervals = math.ceil(top / step - 1e-9)
            if intervals <= most:
                return float(step), max(intervals, 1)
    return float(10 * power * 100), 1


def _decimals(step: float) -> int:
    """Decimals a tick label needs so that every multiple of `step` is exact."""
    for decimals in range(0, 9):
        if abs(round(step, decimals) - step) < step * 1e-6:
            return decimals
    return 8


def tick_text(value: float, step: float, unit: str) -> str:
    """A tick's label, with as many decimals as the step needs (never 0.2/0.5/0.8 noise)."""
    if value and step >= 1000 and abs(value) >= 1000 and unit not in ("$", "%"):
        big, suffix = (value / 1_000_000, "M") if abs(value) >= 1_000_000 else (value / 1000, "k")
        text = f"{big:.2f}".rstrip("0").rstrip(".") + suffix
        return f"{text} {unit}" if unit else text
    text = f"{value:,.{_decimals(step)}f}"
    if "." in text:
        text = text.rstrip("0").rstrip(".")
    if unit == "$":
        return f"${text}"
    if unit == "%":
        return f"{text}%"
    return f"{text} {unit}" if unit else text


def fmt(value: float | None, unit: str = "") -> str:
    if value is None:
        return "-"
    if unit == "$":
        if value == 0:
            return "$0"
        return f"${value:,.4f}" if abs(value) < 1 else f"${value:,.2f}"
    if unit == "%":
        return f"{value:.1f}%"
    if abs(value) >= 1_000_000:
        text = f"{value / 1_000_000:.1f}M"
    elif abs(value) >= 10_000:
        text = f"{value / 1000:.1f}k"
    elif value == int(value):
        text = f"{int(value):,}"
    else:
        text = f"{value:,.1f}"
    return f"{text} {unit}".strip() if unit and unit not in ("$", "%") else text


def _x_ticks(starts: Sequence[datetime], bucket: str, x_of: list[float]) -> tuple[Tick, ...]:
    """Labels on the x axis: hours within a day, dates beyond (each day's midnight, then
    every few days), centred on their bucket but the last, which ends at the edge."""
    if not starts:
        return ()
    span = starts[-1] - starts[0]
    if bucket == "hour" and span <= timedelta(hours=36):
        every = max(1, math.ceil(len(starts) / 6))
        chosen = [i for i, s in enumerate(starts) if s.hour % every == 0]
        text = "%H:00"
    else:
        days = max(1, span.days)
        every_days = 1 if days <= 8 else (2 if days <= 16 else 5)
        chosen = [
            i for i, s in enumerate(starts) if s.hour == 0 and s.toordinal() % every_days == 0
        ]
        text = "%b %d"
    ticks = []
    for i in chosen:  # centred (the first may reach into the axis' margin); the last inside
        anchor = "end" if x_of[i] > 98 else "middle"
        ticks.append(Tick(x_of[i], starts[i].strftime(text), anchor))
    return tuple(ticks)


def _when(moment: datetime, bucket: str) -> str:
    return moment.strftime("%b %d %H:00 UTC" if bucket == "hour" else "%b %d")


def chart(
    title: str,
    unit: str,
    starts: Sequence[datetime],
    bucket: str,
    series: Sequence[tuple[str, Sequence[float | None]]],
    empty_text: str = "No requests in this window",
    *,
    whole: bool = False,
) -> Chart:
    """Lines over the buckets starting at `starts` (oldest first); None is a point left out
    of its line (a gap), never drawn as zero. A chart whose values are all zero or missing
    is empty and says so. `whole`: counts, whose ticks are whole numbers."""
    values = [v for _, vs in series for v in vs if v is not None]
    empty = not any(values)
    step, intervals = nice_scale(max(values, default=0.0), whole=whole)
    top = step * intervals
    count = len(starts)

    def x(i: int) -> float:
        if count <= 1:
            return 50.0
        return round(_INSET + (100 - 2 * _INSET) * i / (count - 1), 3)

    def y(v: float) -> float:
        return round(PLOT_H - (PLOT_H - _TOP) * v / top, 1)

    x_of = [x(i) for i in range(count)]
    lines = []
    for colour, (name, vs) in enumerate(series):
        points = [(x_of[i] * LINE_W / 100, y(v)) for i, v in enumerate(vs) if v is not None]
        lonely = tuple(
            (x_of[i], y(v))
            for i, v in enumerate(vs)
            if v is not None
            and (i == 0 or vs[i - 1] is None)
            and (i == len(vs) - 1 or vs[i + 1] is None)
        )
        last = next((v for v in reversed(vs) if v is not None), None)
        lines.append(
            Line(
                name,
                colour % 3,
                " ".join(f"{a:g},{b:g}" for a, b in points),
                fmt(last, unit),
                lonely,
            )
        )
    y_ticks = tuple(
        Tick(y(step * k), tick_text(step * k, step, unit)) for k in range(intervals + 1)
    )
    width = (100 - 2 * _INSET) / max(count - 1, 1) if count > 1 else 100.0
    columns = []
    for i, start in enumerate(starts):
        said = ", ".join(f"{name} {fmt(vs[i], unit)}" for name, vs in series if i < len(vs))
        left = max(0.0, x_of[i] - width / 2)
        columns.append(
            Column(
                x_of[i],
                round(left, 3),
                round(min(width, 100 - left), 3),
                f"{_when(start, bucket)}: {said}",
                "start" if x_of[i] < 50 else "end",
            )
        )
    return Chart(
        title,
        unit,
        tuple(lines),
        y_ticks,
        _x_ticks(starts, bucket, x_of),
        tuple(columns),
        empty,
        empty_text,
    )
