"""Server-side SVG bar charts for the billing console (no JavaScript, no remote files).

:func:`bar_chart` computes the geometry (bars, y-axis ticks at "nice" steps of 1, 2 or
5 times a power of ten, thinned x labels) and ``templates/admin/billing/_bar_chart.html``
draws it as inline SVG with presentation attributes only (``fill=``, ``stroke=``), so
the page works under the site's Content-Security-Policy, which forbids inline styles
and scripts. Each bar has a ``<title>`` (the browser's tooltip) with its exact value.

Why no charting library: pygal, the maintained SVG one, writes its CSS into a
``<style>`` element of every chart and links a tooltip script from a CDN; both are
blocked by (or would need exceptions to) that policy. matplotlib would be a heavy
dependency for a few bar charts.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass

# Drawing area in SVG user units (the SVG scales to its container).
WIDTH = 720
HEIGHT = 260
MARGIN_LEFT = 72
MARGIN_RIGHT = 16
MARGIN_TOP = 16
MARGIN_BOTTOM = 40
# At most this many x labels (every k-th bar is labelled on longer charts).
MAX_X_LABELS = 10
# Bars at most this wide (user units), so a chart of two bars does not look like a wall.
MAX_BAR_WIDTH = 48
LABEL_CHARS = 14


@dataclass(frozen=True)
class Bar:
    """One bar: its rectangle (user units, top-left origin) and tooltip text."""

    x: str
    y: str
    width: str
    height: str
    title: str


@dataclass(frozen=True)
class Label:
    """A text at (x, y), user units."""

    x: str
    y: str
    text: str


@dataclass(frozen=True)
class BarChart:
    """Everything the template draws; coordinates are preformatted strings."""

    title: str
    summary: str
    width: int
    height: int
    left: int
    right: int
    top: int
    bottom: int
    bars: list[Bar]
    ticks: list[Label]
    tick_lines: list[str]
    x_labels: list[Label]
    empty: bool

    @property
    def middle_x(self) -> int:
        """Horizontal centre of the plot (for the "no usage" text)."""
        return (self.left + self.right) // 2

    @property
    def middle_y(self) -> int:
        """Vertical centre of the plot."""
        return (self.top + self.bottom) // 2


def nice_step(maximum: float, *, target_ticks: int = 4, integer: bool = False) -> float:
    """The tick step for values up to ``maximum``: 1, 2 or 5 times a power of ten,
    giving about ``target_ticks`` steps (the usual "nice numbers" rule). ``integer``:
    at least 1 (counts of tokens)."""
    if maximum <= 0:
        return 1.0
    raw = maximum / target_ticks
    power = 10 ** math.floor(math.log10(raw))
    fraction = raw / power
    nice = 1 if fraction <= 1 else 2 if fraction <= 2 else 5 if fraction <= 5 else 10
    step = nice * power
    return max(1.0, step) if integer else step


def _f(value: float) -> str:
    return f"{value:.1f}"


def _short(text: str) -> str:
    return text if len(text) <= LABEL_CHARS else text[: LABEL_CHARS - 1] + "…"


def bar_chart(
    *,
    title: str,
    points: Sequence[tuple[str, float]],
    format_value: Callable[[float], str],
    format_tick: Callable[[float], str] | None = None,
    integer: bool = False,
    short_label: Callable[[str], str] = _short,
) -> BarChart:
    """Lay out a bar chart of ``points`` (label, value >= 0) in the given order.

    ``format_value`` writes a value for tooltips and the summary (e.g. ``"1,500
    tokens"``), ``format_tick`` for the y axis (default: ``format_value``);
    ``integer``: values are counts (ticks at whole numbers). With no points, or only
    zeros, the chart is empty: axes, a 0 tick and a "no usage" note.
    """
    left, right = MARGIN_LEFT, WIDTH - MARGIN_RIGHT
    top, bottom = MARGIN_TOP, HEIGHT - MARGIN_BOTTOM
    values = [max(0.0, float(v)) for _, v in points]
    maximum = max(values, default=0.0)
    empty = maximum <= 0
    step = nice_step(maximum, integer=integer)
    scale_top = step * max(1, math.ceil(maximum / step))
    format_tick = format_tick or format_value
    ticks, tick_lines = [], []
    count = 0 if empty else round(scale_top / step)
    for i in range(count + 1):
        value = i * step
        y = bottom - (bottom - top) * value / scale_top
        ticks.append(Label(_f(left - 6), _f(y + 4), format_tick(value)))
        tick_lines.append(_f(y))
    bars, x_labels = [], []
    n = len(points)
    if n:
        slot = (right - left) / n
        bar_width = min(MAX_BAR_WIDTH, slot * 0.8)
        every = math.ceil(n / MAX_X_LABELS)
        for i, ((label, _), value) in enumerate(zip(points, values, strict=True)):
            centre = left + slot * (i + 0.5)
            height = 0.0 if empty else (bottom - top) * value / scale_top
            bars.append(
                Bar(
                    x=_f(centre - bar_width / 2),
                    y=_f(bottom - height),
                    width=_f(bar_width),
                    height=_f(height),
                    title=f"{label}: {format_value(value)}",
                )
            )
            if i % every == 0:
                x_labels.append(Label(_f(centre), _f(bottom + 16), short_label(label)))
    total = format_value(sum(values))
    summary = (
        "no usage in this range"
        if empty
        else f"{n} bars, highest {format_value(maximum)}, total {total}"
    )
    return BarChart(
        title=title,
        summary=summary,
        width=WIDTH,
        height=HEIGHT,
        left=left,
        right=right,
        top=top,
        bottom=bottom,
        bars=bars,
        ticks=ticks,
        tick_lines=tick_lines,
        x_labels=x_labels,
        empty=empty,
    )


def tokens_text(value: float) -> str:
    """``1,500 tokens`` (rounded to whole tokens)."""
    return f"{round(value):,} tokens"


def cost_text(value: float) -> str:
    """A cost in currency units, to 4 decimals below 1 and 2 above (``12.50``)."""
    return f"{value:,.2f}" if value >= 1 or value == 0 else f"{value:,.4f}"


def tokens_tick(value: float) -> str:
    """A compact token count for an axis: ``950``, ``1.5k``, ``2M``."""
    for size, suffix in ((1e9, "G"), (1e6, "M"), (1e3, "k")):
        if value >= size:
            return f"{value / size:g}{suffix}"
    return f"{value:g}"


def cost_tick(value: float) -> str:
    """A cost for an axis, without trailing zeros: ``0``, ``0.25``, ``1.5``, ``12``."""
    return f"{value:,.4f}".rstrip("0").rstrip(".")
