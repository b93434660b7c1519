"""Samples, medians, spreads and ratios: what one (scenario, system) line reports."""

from __future__ import annotations

import math
import statistics
from dataclasses import dataclass, field
from typing import Any


@dataclass(frozen=True, kw_only=True, slots=True)
class Measurement:
    """One repeat of one system: its figures by name, plus anything worth keeping."""

    figures: dict[str, float]
    details: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True, kw_only=True, slots=True)
class FigureSpec:
    """A figure a scenario reports: name, unit, and whether bigger is better."""

    name: str
    unit: str
    higher_is_better: bool = True


@dataclass(kw_only=True, slots=True)
class Summary:
    """K repeats of one system in one scenario, summarised."""

    scenario: str
    system: str
    method: str
    tooling: str
    primary: FigureSpec
    specs: tuple[FigureSpec, ...]
    samples: list[Measurement]
    params: dict[str, Any]
    ratio_to: dict[str, float] = field(default_factory=dict)

    @property
    def label(self) -> str:
        return f"{self.system}:{self.method}"

    def values(self, name: str) -> list[float]:
        return [m.figures[name] for m in self.samples if _finite(m.figures.get(name))]

    def median(self, name: str) -> float | None:
        values = self.values(name)
        return statistics.median(values) if values else None

    def spread(self, name: str) -> float | None:
        """(max - min) / median: the honest noise bar of K repeats on a shared machine."""
        values = self.values(name)
        med = self.median(name)
        if not values or not med:
            return None
        return (max(values) - min(values)) / med

    def to_json(self) -> dict[str, Any]:
        figures = []
        for spec in self.specs:
            figures.append({
                "name": spec.name,
                "unit": spec.unit,
                "median": self.median(spec.name),
                "spread": self.spread(spec.name),
                "samples": self.values(spec.name),
                "higher_is_better": spec.higher_is_better,
            })  # fmt: skip
        primary = figures[self.specs.index(self.primary)]
        return {
            "scenario": self.scenario,
            "system": self.label,
            "tooling": self.tooling,
            "figure": {"name": self.primary.name, "value": primary["median"], "unit": self.primary.unit},
            "median": primary["median"],
            "spread": primary["spread"],
            "samples": primary["samples"],
            "figures": figures,
            "params": self.params,
            "details": [m.details for m in self.samples],
            "ratio_to": self.ratio_to,
        }


def _finite(value: object) -> bool:
    return isinstance(value, int | float) and math.isfinite(value)


def fill_ratios(summaries: list[Summary]) -> None:
    """``ratio_to[other]`` = this median / other's median on the same primary figure.

    Only systems of the same scenario and figure are compared: the ratio of
    an encode rate to a decode rate would mean nothing.
    """
    for this in summaries:
        mine = this.median(this.primary.name)
        this.ratio_to = {}
        for other in summaries:
            if other is this or other.scenario != this.scenario or other.primary != this.primary:
                continue
            theirs = other.median(other.primary.name)
            if mine is not None and theirs:
                this.ratio_to[other.label] = mine / theirs
