"""Shared fixtures: real hubs on 127.0.0.1, started as subprocesses or in-process.

The whole suite runs on three pytest-xdist workers (``deploy/local.sh test``: ``-n 3 --dist
loadgroup``).  :func:`pytest_collection_modifyitems` puts every test in a group, one module per
group, so a module-scoped fixture (a Spark cluster, three hubs) is made once, on one worker; and
it hands the long groups out first, so none of them starts last and runs on alone.
"""

from __future__ import annotations

import os
import signal
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, settings

from tests.support.command import Command
from tests.support.hubprocess import HubProcess

# The suite keeps both cores busy (docs/benchmarks.md): how long one example or one draw takes
# measures the machine's load, not the code (suite55: one draw of an ACL pattern took 0.9 s).
settings.register_profile("suite", deadline=None, suppress_health_check=[HealthCheck.too_slow])
settings.load_profile("suite")

#: The group of the modules that use the session's SparkSession: one worker, so one JVM, not two.
SPARK_SESSION_GROUP = "spark-session"
#: Groups handed out first, longest first (``--durations`` of a whole run, 2026-11-24: the cluster
#: module ~190 s, the SparkSession modules ~90 s, the mesh fault plans ~70 s, the overlay's real
#: hubs ~60-100 s, the switch to the overlay ~70 s (2026-11-28), the stop tests ~45 s).
#: Only the order depends on it: a group missing here runs after these, in collection order.
LONG_GROUPS = ("test_spark_cluster.py", SPARK_SESSION_GROUP, "test_mesh_faults.py", "test_mesh_overlay.py",
               "test_mesh_switch.py", "test_stopping.py", "test_cluster.py", "test_testbed.py")  # fmt: skip


#: The hub setting that runs the mesh as the overlay (mesh v3; ``--mesh-overlay``), read by every
#: hub a test starts from the environment it inherits.
OVERLAY_ENV = "PUB0SUB_HUB_MESH_OVERLAY"


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption(
        "--mesh-overlay", action="store_true",
        help=f"start every test hub with the overlay (mesh v3), as {OVERLAY_ENV}=1 does "
        "(docs/scale.md, 'The mesh tests under the overlay')",
    )  # fmt: skip


#: Spark settings for every JVM the suite starts, in-process or through a command (the file says why).
SPARK_CONF_DIR = Path(__file__).parent / "support" / "spark-conf"
SPARK_DAEMON_JAVA_OPTS = "-XX:TieredStopAtLevel=1 -XX:+UseSerialGC"


def pytest_configure(config: pytest.Config) -> None:
    if config.getoption("--mesh-overlay"):
        os.environ[OVERLAY_ENV] = "1"
    os.environ.setdefault("SPARK_CONF_DIR", str(SPARK_CONF_DIR))
    os.environ.setdefault("SPARK_DAEMON_JAVA_OPTS", SPARK_DAEMON_JAVA_OPTS)
    # A suite started as a shell's background job (``... &``) has SIGINT ignored, and every command
    # a test starts inherits that and keeps it (sdk/tools/stopping.py, as a command under nohup
    # should): its Ctrl-C tests then hang, unless a SparkSession made on the same worker happened
    # to install a handler first.  The tests stand for a terminal's foreground job.
    if signal.getsignal(signal.SIGINT) is signal.SIG_IGN:
        signal.signal(signal.SIGINT, signal.default_int_handler)


def overlay_run() -> bool:
    """Do the hubs of this run start with the overlay (``--mesh-overlay`` or the environment)?"""
    return os.environ.get(OVERLAY_ENV, "").strip().lower() in ("1", "true", "yes", "on")


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    # A test marked overlay_too runs twice in a v2 run: as it is, and with its hubs on the overlay.
    if metafunc.definition.get_closest_marker("overlay_too") is not None and not overlay_run():
        metafunc.fixturenames.append("mesh_overlay")
        metafunc.parametrize("mesh_overlay", [False, True], ids=["v2", "overlay"], indirect=True)


@pytest.fixture
def mesh_overlay(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> bool:
    """The hubs this test starts run the overlay (an ``overlay_too`` test's second run)."""
    if request.param:
        monkeypatch.setenv(OVERLAY_ENV, "1")
    return bool(request.param)


# First: pytest-xdist's own hook, in each worker, reads the xdist_group marks this adds (run after
# it, as it was, every module was split over the workers; pytest_xdist_node_collection_finished).
@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    groups: dict[str, str] = {}
    for item in items:
        module = item.path.name
        if "spark" in getattr(item, "fixturenames", ()):
            groups[module] = SPARK_SESSION_GROUP
        groups.setdefault(module, module)
    for item in items:
        item.add_marker(pytest.mark.xdist_group(groups[item.path.name]))
        if overlay_run() and item.get_closest_marker("v2_only") is not None:
            item.add_marker(pytest.mark.skip(reason="tests mesh v2 itself: every hub of this run is on the overlay"))

    def rank(item: pytest.Item) -> int:
        group = groups[item.path.name]
        return LONG_GROUPS.index(group) if group in LONG_GROUPS else len(LONG_GROUPS)

    items.sort(key=rank)  # stable: the order inside a module is kept


def pytest_xdist_node_collection_finished(node: Any, ids: list[str]) -> None:
    # In a worker of ``--dist loadgroup``, pytest-xdist tags each test's node id with its group
    # (``...::test@group``).  Without the tag (the marks came too late, or pytest 9.2, which
    # ignores it) the groups were spread over the workers without a word.  Stop instead.
    if node.config.getoption("dist") == "loadgroup" and ids and "@" not in ids[0]:
        pytest.exit(
            f"--dist loadgroup: the workers' tests carry no group (pytest {pytest.__version__}), so every "
            "module would be split over them (two Spark clusters); see pyproject.toml's pytest pin",
            returncode=pytest.ExitCode.USAGE_ERROR,
        )


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

    # Its JVM options come from SPARK_CONF_DIR (pytest_configure).
    session = build_session("local[2,3]", app_name="pub0sub-tests")
    register(session)  # data sources are registered per session
    yield session
    session.stop()
