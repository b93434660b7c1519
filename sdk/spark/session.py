"""One place that knows how to start a SparkSession on this kind of machine.

The settings are the ones measured in SPARK_NOTES: loopback only, no UI, few
shuffle partitions, UTC, and the worker Python pinned to this interpreter.
``SPARK_LOCAL_IP`` and ``PYSPARK_PYTHON`` must be in the environment before
the first session starts the JVM, so :func:`prepare_environment` runs first.
"""

from __future__ import annotations

import os
import sys
import tempfile
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

DEFAULT_MASTER = "local[*]"

#: Settings for a single machine; a cluster master keeps its own defaults for the rest.
LOCAL_CONF: dict[str, str] = {
    "spark.ui.enabled": "false",
    "spark.driver.bindAddress": "127.0.0.1",
    "spark.driver.host": "127.0.0.1",
    "spark.sql.shuffle.partitions": "2",
    "spark.sql.adaptive.enabled": "false",
}

#: Settings for every master: results must not depend on the driver's time zone.
COMMON_CONF: dict[str, str] = {
    "spark.sql.session.timeZone": "UTC",
    # Progress bars on stderr interleave with the commands' own lines (analyze has its own).
    "spark.ui.showConsoleProgress": "false",
    "spark.sql.execution.arrow.pyspark.enabled": "true",
    # INT96 is Spark's legacy default; microseconds read back the same in pandas, DuckDB and Arrow.
    "spark.sql.parquet.outputTimestampType": "TIMESTAMP_MICROS",
}


#: Driver logging: warnings and errors only, without the "default log4j profile" banner lines.
LOG4J2_PROPERTIES = """\
rootLogger.level = error
rootLogger.appenderRef.stderr.ref = console
appender.console.type = Console
appender.console.name = console
appender.console.target = SYSTEM_ERR
appender.console.layout.type = PatternLayout
appender.console.layout.pattern = %d{yy/MM/dd HH:mm:ss} %p %c{1}: %m%n%ex
# pyspark prints "Setting default log level" unless the gateway's logger has the root level.
logger.repl.name = org.apache.spark.api.python.PythonGatewayServer
logger.repl.level = error
"""


def _log4j_options() -> str:
    path = Path(tempfile.gettempdir()) / "pub0sub-log4j2.properties"
    if not path.exists() or path.read_text() != LOG4J2_PROPERTIES:
        # Written aside and renamed: another process (a second test worker) may be starting its
        # JVM on this file right now, and must never read it half written.
        fd, aside = tempfile.mkstemp(dir=path.parent, prefix=".pub0sub-log4j2-")
        with os.fdopen(fd, "w") as out:
            out.write(LOG4J2_PROPERTIES)
        os.chmod(aside, 0o644)
        os.replace(aside, path)
    return f"-Dlog4j2.configurationFile=file:{path}"


def prepare_environment() -> None:
    """Set the variables the JVM and the Python workers read at start-up (idempotent)."""
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    # Workers must run this interpreter: the package (sdk, wire) is installed in it.
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)


def is_local(master: str) -> bool:
    return master == "local" or master.startswith("local[")


def build_session(
    master: str = DEFAULT_MASTER,
    *,
    app_name: str = "pub0sub",
    conf: Mapping[str, str] | None = None,
    log_level: str = "ERROR",
    quiet_jvm: bool = True,
) -> SparkSession:
    """Start (or reuse) a SparkSession with the pub0sub settings.

    >>> spark = build_session("local[2]")  # doctest: +SKIP
    """
    prepare_environment()
    from pyspark.sql import SparkSession

    builder = SparkSession.builder.master(master).appName(app_name)
    settings = {**COMMON_CONF, **(LOCAL_CONF if is_local(master) else {}), **(conf or {})}
    if quiet_jvm:
        extra = settings.get("spark.driver.extraJavaOptions", "")
        settings["spark.driver.extraJavaOptions"] = f"{_log4j_options()} {extra}".strip()
    for key, value in settings.items():
        builder = builder.config(key, value)
    spark = builder.getOrCreate()
    spark.sparkContext.setLogLevel(log_level)
    return spark


SHUFFLE_PARTITIONS = "spark.sql.shuffle.partitions"


def fit_shuffle_partitions(spark: SparkSession) -> int:
    """Shuffle partitions = the cores the application holds now, unless someone chose a number.

    Spark's default of 200 suits large shuffles on large clusters; pub0sub's aggregates shuffle
    ~1 row per stored batch, so on a 2-core standalone cluster 200 near-empty tasks per stage made
    analyze's aggregates 4.6x slower than on ``local[2]`` (73.6 s against 16.0 s, 10M records).
    A ``local[N]`` session already has 2 (:data:`LOCAL_CONF`); a value given with ``--conf`` or in
    the builder is kept.  Call it once executors have registered (after a first job): before that
    a cluster's ``defaultParallelism`` is Spark's floor of 2.  Returns the number in force.
    """
    if spark.sparkContext.getConf().contains(SHUFFLE_PARTITIONS):
        return int(spark.conf.get(SHUFFLE_PARTITIONS) or 0)
    cores = max(2, spark.sparkContext.defaultParallelism)
    spark.conf.set(SHUFFLE_PARTITIONS, str(cores))
    return cores
