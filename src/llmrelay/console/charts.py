"""Time-series charts as inline SVG, drawn on the server (they work without JavaScript; the
dashboard's script only fetches them again). Geometry only: the template draws the shapes,
and the colours come from the stylesheet (no inline style: the CSP allows none)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

WIDTH, HEIGHT = 600, 180
_LEFT, _RIGHT, _TOP, _BOTTOM = 48, 8, 10, 24


@dataclass(frozen=True, slots=True)
class Line:
    name: str
    points: str  # "x,y x,y ..." for <polyline>
    last: str  # the latest value, for the legend
    dots: tuple[tuple[float, float], ...]


@dataclass(frozen=True, slots=True)
class Chart:
    title: str
    unit: str
    lines: tuple[Line, ...]
    y_ticks: tuple[tuple[float, str], ...]
    x_ticks: tuple[tuple[float, str], ...]
    empty: bool
    width: int = WIDTH
    height: int = HEIGHT
    left: int = _LEFT
    right: int = WIDTH - _RIGHT
    top: int = _TOP
    bottom: int = HEIGHT - _BOTTOM


def _nice(top: float) -> float:
    if top <= 0:
        return 1.0
    step = 10 ** len(str(int(top))) / 10 if top >= 1 else 0.1
    while step * 4 < top:
        step *= 2
    while step * 4 >= top * 2 and step > 0.001:
        step /= 2
    return step * 4 if step * 4 >= top else step * 8


def fmt(value: float | None, unit: str = "") -> str:
    if value is None:
        return "-"
    if unit == "$":
        return f"${value:,.4f}" if value < 1 else f"${value:,.2f}"
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


def chart(
    title: str,
    unit: str,
    labels: Sequence[str],
    series: Sequence[tuple[str, Sequence[float | None]]],
) -> Chart:
    """Lines over `labels` (the x axis, oldest first); None is a gap-free zero-free point
    left out of its line."""
    values = [v for _, vs in series for v in vs if v is not None]
    top = _nice(max(values, default=0.0))
    span_x = max(len(labels) - 1, 1)
    inner_w = WIDTH - _RIGHT - _LEFT
    inner_h = HEIGHT - _BOTTOM - _TOP

    def x(i: int) -> float:
        return round(_LEFT + inner_w * i / span_x, 1)

    def y(v: float) -> float:
        return round(HEIGHT - _BOTTOM - inner_h * v / top, 1)

    lines = []
    for name, vs in series:
        dots = tuple((x(i), y(v)) for i, v in enumerate(vs) if v is not None)
        last = next((v for v in reversed(vs) if v is not None), None)
        lines.append(Line(name, " ".join(f"{a},{b}" for a, b in dots), fmt(last, unit), dots))
    y_ticks = tuple((y(top * k / 4), fmt(top * k / 4, unit)) for k in range(5))
    step = max(1, len(labels) // 6)
    x_ticks = tuple((x(i), labels[i]) for i in range(0, len(labels), step))
    return Chart(title, unit, tuple(lines), y_ticks, x_ticks, empty=not values)
