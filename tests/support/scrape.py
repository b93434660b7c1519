"""Reading a hub's operators' port: Prometheus samples, probes, the status page's JSON."""

from __future__ import annotations

import json
import urllib.error
import urllib.request
from typing import Any

from prometheus_client.parser import text_string_to_metric_families

#: Sample name and its labels (sorted) -> value.
Samples = dict[tuple[str, tuple[tuple[str, str], ...]], float]


def get(address: str, path: str, timeout: float = 5.0) -> tuple[int, str, bytes]:
    """``(status, content type, body)`` of ``GET http://address/path`` (error statuses too)."""
    try:
        with urllib.request.urlopen(f"http://{address}{path}", timeout=timeout) as reply:
            return reply.status, reply.headers.get("Content-Type", ""), reply.read()
    except urllib.error.HTTPError as err:
        return err.code, err.headers.get("Content-Type", ""), err.read()


def scrape(address: str) -> Samples:
    status, _kind, body = get(address, "/metrics")
    assert status == 200, body
    samples: Samples = {}
    for family in text_string_to_metric_families(body.decode()):
        for s in family.samples:
            samples[(s.name, tuple(sorted(s.labels.items())))] = s.value
    return samples


def value(samples: Samples, metric: str, /, **labels: str) -> float:
    """The one sample ``metric`` whose labels include ``labels`` (KeyError naming what exists)."""
    found = [v for (n, ls), v in samples.items() if n == metric and set(labels.items()) <= set(ls)]
    if len(found) != 1:
        have = sorted(str(dict(ls)) for (n, ls) in samples if n == metric)
        raise KeyError(f"{metric}{labels}: {len(found)} samples match; the hub has {have}")
    return found[0]


def page_state(address: str) -> dict[str, Any]:
    status, _kind, body = get(address, "/api/status")
    assert status == 200, body
    return dict(json.loads(body))
