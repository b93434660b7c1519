"""The status page in a real browser: Debian's headless Chromium, driven by selenium, against a
real 3-hub cluster -- the README's, started as ``pub0sub cluster up --metrics`` starts it
(sdk/tools/cluster.py, on free ports here).  The page loads, draws the two peers as linked, and its rates move when a
publisher starts.  A screenshot is kept in ``test-artifacts/`` (ignored by git); the test prints
where.
"""

from __future__ import annotations

import shutil
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

import sdk
from sdk.tools.cluster import HubInfo, LocalCluster
from tests.support.waiting import wait_until

ROOT = Path(__file__).resolve().parent.parent
ARTIFACTS = ROOT / "test-artifacts"
CHROMIUM = shutil.which("chromium") or "/usr/bin/chromium"
CHROMEDRIVER = shutil.which("chromedriver") or "/usr/bin/chromedriver"
#: What the page shows for a figure not known yet (a rate before the second sample).
NONE = "\N{EN DASH}"

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(
        not (Path(CHROMIUM).exists() and Path(CHROMEDRIVER).exists()),
        reason="Debian's chromium and chromium-driver are not installed (deploy/local.sh test installs them "
        "with apt-get when it runs as root)",
    ),
]


@pytest.fixture
def browser() -> Iterator[Any]:
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    options = webdriver.ChromeOptions()
    options.binary_location = CHROMIUM
    for arg in ("--headless=new", "--no-sandbox", "--disable-dev-shm-usage", "--window-size=1400,1100"):
        options.add_argument(arg)
    driver = webdriver.Chrome(service=Service(executable_path=CHROMEDRIVER), options=options)
    try:
        yield driver
    finally:
        driver.quit()


@pytest.fixture
def cluster3(tmp_path: Path) -> Iterator[LocalCluster]:
    with LocalCluster(3, tmp_path / "cluster", metrics=True, note=lambda _line: None) as cluster:
        assert cluster.wait_converged(), "the three hubs did not link to each other"
        yield cluster


def peer_id(hub: HubInfo) -> str:
    return hub.multiaddrs[0].rsplit("/p2p/", 1)[1]


# The page redraws its tables and graph every second: an element found by one WebDriver call may be
# gone by the next (a stale element).  So each look reads what it needs in one script, which runs
# between two of the page's redraws.


def texts(browser: Any, selector: str) -> list[str]:
    """The text of each element matching ``selector`` (SVG text has no innerText: textContent)."""
    script = "return [...document.querySelectorAll(arguments[0])].map(e => (e.innerText ?? e.textContent).trim())"
    return [str(t) for t in browser.execute_script(script, selector)]


def attributes(browser: Any, selector: str, *names: str) -> list[tuple[str, ...]]:
    script = "return [...document.querySelectorAll(arguments[0])].map(e => arguments[1].map(n => e.getAttribute(n)))"
    return [tuple(row) for row in browser.execute_script(script, selector, list(names))]


class Publisher(threading.Thread):
    """Publishes one small message every 10 ms to ``topic`` until stopped (at most 60 s)."""

    def __init__(self, address: str, topic: str) -> None:
        super().__init__(daemon=True)
        self.address, self.topic = address, topic
        self.stop = threading.Event()
        self.sent = 0

    def run(self) -> None:
        with sdk.connect_blocking(self.address) as client:
            while not self.stop.wait(0.01) and self.sent < 6000:
                client.publish(self.topic, b"tick %d" % self.sent)
                client.flush()
                self.sent += 1


def test_status_page_shows_the_mesh_and_live_rates(browser: Any, cluster3: LocalCluster) -> None:
    a, b, c = cluster3.hubs
    browser.get(f"{a.metrics_url}/")
    assert browser.title.startswith("pub0sub")

    def text(element_id: str) -> str:
        found = texts(browser, f"#{element_id}")
        return found[0] if found else ""

    wait_until(lambda: text("live") == "live", timeout=15, what="the page to receive live samples")
    wait_until(lambda: text("peer-count") == "2 of 2 peers linked", timeout=15,
               what=lambda: f"the page to show 2 linked peers (shows {text('peer-count')!r})")  # fmt: skip
    nodes = attributes(browser, "#mesh g.peer", "data-peer-id", "data-state")
    assert {peer for peer, _state in nodes} == {peer_id(b), peer_id(c)}
    assert {state for _peer, state in nodes} == {"linked"}
    assert text("rate-in") == "0"

    publisher = Publisher(a.address, "page.ticks")
    publisher.start()
    try:
        def moving() -> bool:
            rates = texts(browser, '#topics tr[data-topic="page.ticks"] td.rate')
            return bool(rates) and rates[0] not in ("0", NONE) and text("rate-in") not in ("0", NONE)

        wait_until(moving, timeout=20, what="the page's rates to move once the publisher runs")
        # The round-trip times drawn on the edges come from the mesh heartbeats.
        assert any(t.endswith(" ms") for t in texts(browser, "#mesh text.rtt"))
        ARTIFACTS.mkdir(exist_ok=True)
        shot = ARTIFACTS / "status-page.png"
        assert browser.save_screenshot(str(shot))
        print(f"status page screenshot: {shot}")
    finally:
        publisher.stop.set()
        publisher.join(10)
    assert publisher.sent > 0
