"""Latency samples, percentiles and Markdown tables."""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

__all__ = ["Counts", "Latency", "fmt_bytes", "fmt_ms", "markdown_table", "percentile"]


def percentile(values: Sequence[float], q: float) -> float:
    """The ``q``-th percentile (0-100) of ``values``, interpolating between ranks."""
    if not values:
        return math.nan
    ordered = sorted(values)
    rank = (len(ordered) - 1) * q / 100.0
    low = math.floor(rank)
    high = min(low + 1, len(ordered) - 1)
    return ordered[low] + (ordered[high] - ordered[low]) * (rank - low)


@dataclass
class Latency:
    """Durations of one operation, in seconds."""

    samples: list[float] = field(default_factory=list)

    def add(self, seconds: float) -> None:
        self.samples.append(seconds)

    @property
    def n(self) -> int:
        return len(self.samples)

    @property
    def p50_ms(self) -> float:
        return percentile(self.samples, 50) * 1000

    @property
    def p99_ms(self) -> float:
        return percentile(self.samples, 99) * 1000

    @property
    def mean_ms(self) -> float:
        return sum(self.samples) / len(self.samples) * 1000 if self.samples else math.nan


@dataclass
class Counts:
    """A per-operation count (round trips, bytes) seen over many runs."""

    values: list[int] = field(default_factory=list)

    def add(self, value: int) -> None:
        self.values.append(value)

    def text(self) -> str:
        """``"3"`` when every run agreed, else ``"3-4"`` (min-max)."""
        if not self.values:
            return "-"
        low, high = min(self.values), max(self.values)
        return str(low) if low == high else f"{low}-{high}"

    @property
    def typical(self) -> int:
        """The median value."""
        return round(percentile([float(v) for v in self.values], 50)) if self.values else 0


def fmt_ms(value: float) -> str:
    """Milliseconds with a precision that suits the magnitude."""
    if math.isnan(value):
        return "-"
    if value < 10:
        return f"{value:.3f}"
    if value < 100:
        return f"{value:.2f}"
    return f"{value:.1f}"


def fmt_bytes(value: int) -> str:
    """Bytes, with a KiB figure beside them from 1 KiB on."""
    if value < 1024:
        return f"{value} B"
    return f"{value:,} B ({value / 1024:.1f} KiB)"


def markdown_table(header: Sequence[str], rows: Iterable[Sequence[str]]) -> str:
    """A GitHub-flavoured Markdown table; numeric-looking columns are right-aligned."""
    body = [list(r) for r in rows]
    align = []
    for col in range(len(header)):
        cells = [r[col] for r in body if col < len(r)]
        numeric = bool(cells) and all(_numeric(c) for c in cells)
        align.append("---:" if numeric else "---")
    lines = [
        "| " + " | ".join(header) + " |",
        "|" + "|".join(align) + "|",
        *("| " + " | ".join(r) + " |" for r in body),
    ]
    return "\n".join(lines)


def _numeric(cell: str) -> bool:
    head = cell.split(" ", maxsplit=1)[0].replace(",", "").replace("-", "").replace(".", "")
    return head.isdigit() or cell == "-"
