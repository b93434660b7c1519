"""The core's metric families (``hub/core/metrics.py``) as a prometheus-client collector.

A custom collector: nothing is registered up front and nothing is counted as traffic
flows; each scrape asks the core for its families and turns them into
prometheus-client's, which then writes the text exposition format.
"""

from __future__ import annotations

from collections.abc import Iterator

from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, ProcessCollector, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, HistogramMetricFamily, Metric
from prometheus_client.utils import floatToGoString

from ..core.histogram import Histogram
from ..core.metrics import Family, MetricsSources, collect

__all__ = ["CONTENT_TYPE_LATEST", "HubCollector", "hub_registry", "scrape"]


class HubCollector:
    def __init__(self, sources: MetricsSources) -> None:
        self.sources = sources

    def collect(self) -> Iterator[Metric]:
        for family in collect(self.sources):
            yield _convert(family)


def _convert(family: Family) -> Metric:
    names = list(family.labels)
    if family.kind == "histogram":
        histogram = HistogramMetricFamily(family.name, family.help, labels=names)
        for labels, h in family.samples:
            assert isinstance(h, Histogram)
            buckets = [(floatToGoString(bound), n) for bound, n in h.cumulative()]
            histogram.add_metric([labels.get(n, "") for n in names], buckets, h.sum)
        return histogram
    kind = CounterMetricFamily if family.kind == "counter" else GaugeMetricFamily
    metric = kind(family.name, family.help, labels=names)
    for labels, value in family.samples:
        metric.add_metric([labels.get(n, "") for n in names], value)
    return metric


def hub_registry(sources: MetricsSources) -> CollectorRegistry:
    """The hub's figures and the process' own (CPU, memory, open files), in one registry."""
    registry = CollectorRegistry(auto_describe=False)
    registry.register(HubCollector(sources))
    ProcessCollector(registry=registry)
    return registry


def scrape(registry: CollectorRegistry) -> bytes:
    return generate_latest(registry)
