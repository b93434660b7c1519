"""Progress on stderr: one line per milestone, and a live task counter while Spark works.

Milestone lines are printed whatever stderr is, so logs of a batch run show them; the live line
(rich's status spinner) only appears on a terminal.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING

from rich.console import Console
from rich.markup import escape

from ...tools.stopping import check_stop

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

POLL_SECONDS = 0.5


class Progress:
    def __init__(self, *, quiet: bool = False, console: Console | None = None) -> None:
        self.console = console or Console(stderr=True, highlight=False, soft_wrap=True)
        self.quiet = quiet
        self.started = time.perf_counter()

    def _line(self, text: str, style: str = "") -> None:
        # Each stage starts and ends with a line: the safe points where a Ctrl-C, which meanwhile
        # only cancelled the Spark jobs (cli.SparkCanceller), stops the job.
        check_stop()
        if not self.quiet:
            elapsed = time.perf_counter() - self.started
            body = f"[{style}]{escape(text)}[/]" if style else escape(text)
            self.console.print(f"[dim]analyze {elapsed:6.1f}s[/] {body}")

    def step(self, text: str) -> None:
        self._line(text)

    def warn(self, text: str) -> None:
        # Findings about the data are shown even with --quiet: they are why the job exists.
        if self.quiet:
            self.console.print(f"analyze: {escape(text)}", style="bold red")
        else:
            self._line(text, "bold red")

    @contextmanager
    def status(self, text: str) -> Iterator[None]:
        self._line(text + " ...")
        if self.quiet or not self.console.is_terminal:
            yield
            return
        with self.console.status(escape(text)):
            yield

    @contextmanager
    def spark_stage(self, spark: SparkSession, label: str) -> Iterator[None]:
        """Run a Spark action under a live ``label: tasks done/total`` line (a terminal only)."""
        self._line(label + " ...")
        if self.quiet or not self.console.is_terminal:
            yield
            return
        tracker = spark.sparkContext.statusTracker()
        stop = threading.Event()
        with self.console.status(escape(label)) as status:

            def poll() -> None:
                while not stop.wait(POLL_SECONDS):
                    done = total = 0
                    for stage_id in tracker.getActiveStageIds():
                        info = tracker.getStageInfo(stage_id)
                        if info is not None:
                            done += info.numCompletedTasks
                            total += info.numTasks
                    elapsed = time.perf_counter() - self.started
                    status.update(escape(f"{label}: {done}/{total} tasks ({elapsed:.0f} s)"))

            thread = threading.Thread(target=poll, name="analyze-progress", daemon=True)
            thread.start()
            try:
                yield
            finally:
                stop.set()
                thread.join()
