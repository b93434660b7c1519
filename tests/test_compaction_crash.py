"""A hub SIGKILLed mid-compaction recovers every latest value, no offset twice (docs/compaction.md,
"crash safety").  Real ``python -m hub`` processes and real files: the test hook
``PUB0SUB_COMPACTION_PAUSE`` freezes a pass at one step so the kill lands exactly there, and a
bounded loop kills at random moments of passes running on a log that keeps growing."""

from __future__ import annotations

import os
import random
import time
from pathlib import Path

import pytest

import sdk
from hub.storage.compaction_checkpoint import CHECKPOINT_NAME, load_checkpoint
from hub.storage.compaction_read import PAUSE_ENV
from tests.support.compacting import (
    History,
    StartHub,
    active_base,
    check_read,
    compacting_hub,
    read_all,
    topic_dir,
    wait_compacted,
)
from tests.support.scenarios import kill9

pytestmark = pytest.mark.slow


def wait_file(path: Path, within: float = 30.0) -> None:
    deadline = time.monotonic() + within
    while not path.exists():
        assert time.monotonic() < deadline, f"{path} did not appear within {within} s"
        time.sleep(0.02)


def leftovers(data: Path) -> list[str]:
    return sorted(p.name for p in topic_dir(data).iterdir() if p.suffix in (".swap", ".compacting"))


@pytest.mark.parametrize(
    ("step", "on_disk"),
    [
        ("temp", ".compacting"),  # the output half made: thrown away on start
        ("swap", ".swap"),  # the output durable, nothing replaced yet: finished on start
        ("unlinked", ".swap"),  # the replaced segments after the first removed: finished on start
        ("placed", None),  # every output in place, the checkpoint not written: the next pass cleans again
        ("checkpointed", None),  # the checkpoint written: the next pass goes on from it
    ],
)
def test_killed_at_each_step_recovers(start_hub: StartHub, tmp_path: Path, step: str, on_disk: str | None) -> None:
    data = tmp_path / "data"
    hub = compacting_hub(start_hub, data, env={PAUSE_ENV: step})
    history = History()
    with sdk.connect_blocking(hub.address) as client:
        history.publish_rounds(client, rounds=30, keys=20)
    wait_file(data / f"compaction-paused-{step}")
    # The hub still serves while a pass is paused in its worker (appends never wait for it).
    if step == "temp":
        with sdk.connect_blocking(hub.address) as client:
            history.publish_rounds(client, rounds=1, keys=3, tag="during")
    kill9(hub)
    if on_disk is not None:
        assert [n for n in leftovers(data) if n.endswith(on_disk)], leftovers(data)
    else:
        assert leftovers(data) == []
        assert (topic_dir(data) / CHECKPOINT_NAME).exists() == (step == "checkpointed")
    # Read the recovered log back on a hub that does not compact: what recovery alone left.
    hub = start_hub("--data-dir", str(data), "--segment-bytes", "2048")
    assert leftovers(data) == []
    messages = read_all(hub.address)
    check_read(messages, history)
    if step != "temp":
        assert len(messages) < len(history.records), "the committed compaction was finished"
    hub.stop()
    # And compaction goes on from there, to a checkpoint at the active segment.
    hub = compacting_hub(start_hub, data)
    wait_compacted(hub.address)
    check_read(read_all(hub.address), history)
    assert load_checkpoint(topic_dir(data)).clean_end == active_base(data)


def test_killed_at_random_moments(start_hub: StartHub, tmp_path: Path) -> None:
    data = tmp_path / "data"
    rng = random.Random(int.from_bytes(os.urandom(4), "big"))
    history = History()
    for round_ in range(5):  # bounded: five kills
        hub = compacting_hub(start_hub, data, "--compact-check-seconds", "0.02")
        with sdk.connect_blocking(hub.address) as client:
            if round_:
                check_read(read_all(hub.address, quiet=0.5), history)
            history.publish_rounds(client, rounds=15, keys=25, tag=f"{round_}-")
            history.delete(client, f"k{round_:03d}".encode())
        time.sleep(rng.uniform(0.0, 0.3))
        kill9(hub)
    hub = start_hub("--data-dir", str(data), "--segment-bytes", "2048")
    check_read(read_all(hub.address), history)
