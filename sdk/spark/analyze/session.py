"""The analyze job's SparkSession, made so that Ctrl-C stops the job cleanly at any moment.

* It starts on a thread of its own.  pyspark's ``SparkContext``, made on the main thread, puts in
  a SIGINT handler that raises on *every* Ctrl-C (a second one breaks ``spark.stop()``) after
  cancelling the jobs through py4j from inside the handler; made elsewhere it leaves SIGINT to
  :mod:`sdk.tools.stopping`, and the main thread can be interrupted while the JVM starts.
* Its jobs are cancelled from another thread (:meth:`JobSession.cancel`, for
  :func:`sdk.tools.stopping.stop_softly`): py4j gives each thread its own connection, and the main
  thread's is busy waiting for the job being cancelled.  An interrupt inside that call would
  leave a dead connection, which py4j and the JVM both report with stack traces.
* It is stopped once, after its start has ended, and only if this job made it: a session that
  existed before (a notebook, a test) is reused and left running.
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Mapping
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

#: How long stopping waits for a JVM still starting, and for the jobs' cancellation.
START_SECONDS = 120.0
CANCEL_SECONDS = 30.0


class JobSession:
    def __init__(self, master: str, conf: Mapping[str, str]) -> None:
        from pyspark.sql import SparkSession

        self.master = master
        self.conf = dict(conf)
        self.owned = SparkSession.getActiveSession() is None
        self.spark: SparkSession | None = None
        self._error: BaseException | None = None
        self._starter = threading.Thread(target=self._build, name="analyze-spark-start", daemon=True)
        self._canceller: threading.Thread | None = None

    def _build(self) -> None:
        from sdk.spark.session import build_session

        try:
            self.spark = build_session(self.master, app_name="pub0sub analyze", conf=self.conf)
        except BaseException as exc:  # handed to the main thread by start()
            self._error = exc

    def start(self) -> SparkSession:
        """Start (or reuse) the session and wait for it; a stop signal interrupts the wait."""
        self._starter.start()
        self._starter.join()
        if self._error is not None:
            raise self._error
        assert self.spark is not None
        return self.spark

    def cancel(self) -> None:
        """Cancel every running Spark job, from a thread of its own; returns at once."""
        self._canceller = threading.Thread(target=self._cancel, name="analyze-cancel", daemon=True)
        self._canceller.start()

    def _cancel(self) -> None:
        spark = self.spark
        if spark is None:
            return  # still starting: close() stops it once it is up
        with contextlib.suppress(Exception):  # a context stopping meanwhile: nothing left to cancel
            # Spark logs every job it aborts at ERROR, with Java stack traces: asked for, not news.
            spark.sparkContext.setLogLevel("OFF")
            spark.sparkContext.cancelAllJobs()

    def close(self) -> None:
        """Wait for a start or a cancellation under way, then stop the session if this job made it."""
        if self._starter.is_alive():
            self._starter.join(START_SECONDS)
        if self._canceller is not None:
            self._canceller.join(CANCEL_SECONDS)
        if self.spark is not None and self.owned:
            self.spark.stop()
