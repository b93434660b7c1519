"""Every block marked runnable in the docs runs, in order, against real hubs.

A fenced block whose info string is ``bash runnable`` or ``python runnable`` (in README.md
and docs/*.md) is run as a reader would: the blocks of one page in order, in one fresh
directory, bash with ``set -euo pipefail``, Python with the project's interpreter, the
``pub0sub`` command on the PATH.  The docs name the well-known ports 7420-7459; so that a
run never meets another hub on this machine, they are moved to a free range first (74NN ->
BASE+NN-20).  Hubs a page starts are stopped at the end even when a block fails: by
``pub0sub cluster down`` and by the PIDs the page wrote to ``*.pid`` files.
"""

from __future__ import annotations

import contextlib
import os
import random
import re
import signal
import socket
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
BLOCK = re.compile(r"^```(bash|python) runnable\n(.*?)^```\n", re.M | re.S)
PORT = re.compile(r"\b74([2-5]\d)\b")
BLOCK_SECONDS = 120


def runnable_blocks(page: Path) -> list[tuple[str, str]]:
    return [(m.group(1), m.group(2)) for m in BLOCK.finditer(page.read_text())]


def pages_with_blocks() -> list[Path]:
    return [page for page in PAGES if runnable_blocks(page)]


def free_base(span: int = 40) -> int:
    """A port range ``base..base+span`` with nothing listening (checked by binding each).

    The scan starts at a random place: two suites on one machine (or a page's cluster still
    closing) must not both take the first free range."""
    start = random.randrange(21000, 31000)
    for base in [*range(start, 32000, 97), *range(21000, start, 97)]:
        try:
            for port in range(base, base + span):
                with socket.socket() as s:
                    s.bind(("127.0.0.1", port))
        except OSError:
            continue
        return base
    raise RuntimeError("no free port range")


def test_the_quickstart_has_runnable_blocks() -> None:
    assert len(runnable_blocks(ROOT / "docs" / "quickstart.md")) >= 5


def test_every_expected_output_names_a_runnable_block() -> None:
    for page, index in EXPECTED:
        [path] = [p for p in PAGES if p.name == page]
        assert index < len(runnable_blocks(path)), (page, index)


@pytest.mark.slow
@pytest.mark.timeout(600)
@pytest.mark.parametrize("page", pages_with_blocks(), ids=lambda p: str(p.relative_to(ROOT)))
def test_runnable_blocks_run(page: Path, tmp_path: Path) -> None:
    base = free_base()
    env = {**os.environ, "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}",
           "PYTHONPATH": str(ROOT), "PYTHONUNBUFFERED": "1"}  # fmt: skip
    try:
        for i, (language, code) in enumerate(runnable_blocks(page)):
            code = PORT.sub(lambda m: str(base + int(m.group(1)) - 20), code)
            argv = ["bash", "-c", "set -euo pipefail\n" + code] if language == "bash" else [sys.executable, "-c", code]
            done = subprocess.run(argv, cwd=tmp_path, env=env, capture_output=True, text=True,
                                  timeout=BLOCK_SECONDS, stdin=subprocess.DEVNULL)  # fmt: skip
            assert done.returncode == 0, (
                f"{page.name} block {i + 1} ({language}) failed with {done.returncode}:\n{code}\n"
                f"--- stdout\n{done.stdout}\n--- stderr\n{done.stderr}"
            )
            check_output(page, i, done.stdout)
    finally:
        stop_what_the_page_started(tmp_path, env)


#: What blocks say they print (page, block index from 0): each text must be in the block's output.
EXPECTED: dict[tuple[str, int], list[str]] = {
    ("README.md", 0): ["hub-3  up", "3 of 3 hubs up", 'pub0sub_mesh_peers{state="linked"} 2.0',
                       "orders.eu 0 hello\norders.eu 1 world\n", '"name": "SUBSCRIBE"', 'LOG_BATCH'],
    ("quickstart.md", 1): ["first order", "second order"],
    ("quickstart.md", 2): ["stored at {'payments.card': 0}", "payments.card 0 b'42.00 EUR'"],
    ("quickstart.md", 3): ['"ready": true', '"mesh": true', 'pub0sub_mesh_peers{state="linked"} 2.0',
                           'pub0sub_topic_messages_total{topic="sensors.t1"} 3.0'],
    ("sdk.md", 1): ["orders.eu 0 b'cust-9' b'{\"id\": 1}'", "orders.us 0 None b'{\"id\": 2}'"],
    ("sdk.md", 2): ["stored at 0 at"],
    ("sdk.md", 3): ["b'dark' [b'theme']"],
    ("sdk.md", 4): ["jobs.build 0 b'repo@abc'", "[{'rows': 0}, {'rows': 1}]"],
}  # fmt: skip


def check_output(page: Path, index: int, stdout: str) -> None:
    """What the pages say their blocks print, they print."""
    for text in EXPECTED.get((page.name, index), []):
        assert text in stdout, f"{page.name} block {index + 1} should print {text!r}; it printed:\n{stdout}"


def stop_what_the_page_started(directory: Path, env: dict[str, str]) -> None:
    for pid_file in directory.glob("*.pid"):
        with contextlib.suppress(ValueError, ProcessLookupError):
            os.kill(int(pid_file.read_text().strip()), signal.SIGTERM)
    if (directory / "pub0sub-cluster-data" / "cluster.json").exists():
        subprocess.run([sys.executable, "-m", "sdk.cli", "cluster", "down"], cwd=directory, env=env,
                       capture_output=True, timeout=60)  # fmt: skip
