"""Shared fixtures: real hubs on 127.0.0.1, started as subprocesses or in-process."""

from __future__ import annotations

import os
import sys
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from tests.support.command import Command
from tests.support.hubprocess import HubProcess


@pytest.fixture
def start_hub() -> Iterator[Callable[..., HubProcess]]:
    """Factory: ``start_hub("--max-body", "4096")`` -> a running :class:`HubProcess`."""
    hubs: list[HubProcess] = []

    def start(*args: str, env: dict[str, str] | None = None, nofile: int | None = None) -> HubProcess:
        hub = HubProcess(*args, env=env, nofile=nofile)
        hubs.append(hub)
        return hub

    yield start
    for hub in hubs:
        hub.stop()


@pytest.fixture
def hub(start_hub: Callable[..., HubProcess]) -> HubProcess:
    """One hub subprocess with default settings."""
    return start_hub()


@pytest.fixture
def hub_address(hub: HubProcess) -> str:
    """``"127.0.0.1:PORT"`` of a fresh hub subprocess."""
    return hub.address


@pytest.fixture
def command() -> Iterator[Callable[..., Command]]:
    """Factory: ``command("sub", "--hub", ...)`` -> a running ``pub0sub`` :class:`Command` (own
    process group, for Ctrl-C tests); any still running at the end is killed by its PID."""
    started: list[Command] = []

    def start(*args: str, **kwargs: Any) -> Command:
        cmd = Command(*args, **kwargs)
        started.append(cmd)
        return cmd

    yield start
    for cmd in started:
        cmd.kill()


@pytest.fixture(scope="session")
def spark() -> Iterator[object]:
    """The test run's one SparkSession, shared by every module (``getOrCreate`` returns it anyway).

    ``local[2,3]``: two cores, and a failed task is retried (``local[2]`` never retries),
    so retry tests run whatever module asked first.
    """
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    from sdk.spark import register
    from sdk.spark.session import build_session

    # Faster JVM start-up (SPARK_NOTES); not for throughput runs.
    session = build_session(
        "local[2,3]",
        app_name="pub0sub-tests",
        conf={"spark.driver.extraJavaOptions": "-XX:+UseSerialGC -XX:TieredStopAtLevel=1"},
    )
    register(session)  # data sources are registered per session
    yield session
    session.stop()
