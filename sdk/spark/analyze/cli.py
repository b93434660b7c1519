"""``pub0sub analyze DATA_DIR... [--master URL] [--out DIR]``: the log analytics job.

Exit status: 0 when the report (or, with ``--check``, a clean verification) is done, or when
stopped by Ctrl-C or SIGTERM; 1 when ``--check`` finds problems or the data has no segment at
all; 2 on usage errors and unreadable inputs (checked before Spark starts).  Corrupted batches
do not fail a report run: they are findings, listed in the report.
"""

from __future__ import annotations

import argparse
import importlib.util
import os
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from ...tools.stopping import run_until_stopped, stop_softly
from .inputs import Segments, UnreadableInput, UsageError, find_hub_dirs, list_segments
from .progress import Progress

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

#: What the job needs beyond the base install: the ``spark`` extra.
NEEDS = ("pyspark", "pyarrow", "numpy", "pandas", "matplotlib")
LOCAL_DRIVER_MEMORY = "4g"

DEFAULT_OUT = "pub0sub-report"
DESCRIPTION = (
    "Spark job over hub data directories: decodes every log segment with the hub's own decoder "
    "(checksums verified), writes Parquet tables (messages, topics, rates, latency) and a report "
    "with plots."
)
EPILOG = """examples:
  pub0sub analyze ./data                       a hub data dir, or a directory of them
  pub0sub analyze hub-a/ hub-b/ --out report   several hubs in one report
  pub0sub analyze ./data --master spark://host:7077
  pub0sub analyze ./data --check               verify every checksum, write nothing
"""


def build_parser(prog: str) -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog=prog, description=DESCRIPTION, epilog=EPILOG,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("data_dirs", nargs="+", metavar="DATA_DIR",
                        help="hub data directory (holds hub-id and topics/), or a directory of them")
    parser.add_argument("--master", default="local[*]", help="Spark master URL (default: local[*])")
    parser.add_argument("--out", default=DEFAULT_OUT, type=Path,
                        help=f"output directory for tables, plots and report (default: ./{DEFAULT_OUT})")
    parser.add_argument("--check", action="store_true",
                        help="only decode and verify every segment; print problems, write nothing")
    parser.add_argument("--conf", action="append", default=[], metavar="KEY=VALUE",
                        help="extra Spark setting, repeatable (e.g. spark.driver.memory=4g)")
    parser.add_argument("-q", "--quiet", action="store_true", help="no progress lines; problems are still shown")
    return parser


def _parse_conf(items: Sequence[str]) -> dict[str, str]:
    conf: dict[str, str] = {}
    for item in items:
        key, sep, value = item.partition("=")
        if not sep or not key.strip():
            raise UsageError(f"--conf wants KEY=VALUE, got {item!r}")
        conf[key.strip()] = value
    return conf


def main(argv: Sequence[str] | None = None, *, prog: str = "pub0sub analyze") -> int:
    parser = build_parser(prog)
    args = parser.parse_args(list(sys.argv[1:] if argv is None else argv))
    missing = [name for name in NEEDS if importlib.util.find_spec(name) is None]
    if missing:
        print(f"{prog}: error: needs {', '.join(missing)}: pip install 'pub0sub[spark]'", file=sys.stderr)
        return 2
    progress = Progress(quiet=args.quiet)
    # Every input is checked here, before Spark starts: a bad one is a line, not a JVM stack trace.
    try:
        conf = _parse_conf(args.conf)
        hubs = find_hub_dirs(args.data_dirs)
        out: Path | None = None if args.check else args.out.expanduser().resolve()
        if out is not None:
            _check_out(out, args.out)
        segments = list_segments(hubs)
    except UnreadableInput as exc:
        print(f"{prog}: error: {exc}", file=sys.stderr)
        return 2
    except UsageError as exc:
        parser.print_usage(sys.stderr)
        print(f"{prog}: error: {exc}", file=sys.stderr)
        return 2

    progress.step(f"found {len(segments.files):,} segment files ({segments.bytes / 1e6:,.1f} MB) "
                  f"in {len(hubs)} hub data director{'y' if len(hubs) == 1 else 'ies'}")
    if not segments.files:
        progress.warn("no log segments (*.log under topics/) to analyze")
        return 1
    began = time.time()
    outcome = run_until_stopped(lambda: _run_job(args.master, conf, segments, out, progress))
    if outcome.stopped:
        report = None if out is None else out / "report.md"
        written = report is not None and report.exists() and report.stat().st_mtime >= began  # not an old run's
        print(f"{prog}: stopped on {outcome.signal}"
              + ("" if out is None else f"; {'' if written else 'no '}report in {out}"), file=sys.stderr)  # fmt: skip
        return 0
    return outcome.value or 0


def _check_out(out: Path, given: Path) -> None:
    if out.exists() and not out.is_dir():
        raise UsageError(f"--out {given} exists and is not a directory")
    try:
        out.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise UsageError(f"cannot create --out {given}: {exc.strerror or exc}") from None
    if not os.access(out, os.W_OK):
        raise UsageError(f"cannot write to --out {given}: permission denied")


def _run_job(master: str, conf: dict[str, str], segments: Segments, out: Path | None, progress: Progress) -> int:
    from sdk.spark.session import is_local

    from .session import JobSession

    started = time.perf_counter()
    if is_local(master):
        # In local mode the tasks run in the driver JVM: whole segment files and Arrow batches
        # of two or more tasks at once do not fit Spark's 1 GiB default (measured: OOM on 64 MiB segments).
        conf.setdefault("spark.driver.memory", LOCAL_DRIVER_MEMORY)
    session = JobSession(master, conf)
    try:
        with progress.status(f"starting Spark ({master})"):
            spark = session.start()
        session_seconds = time.perf_counter() - started
        # A Ctrl-C that finds the main thread waiting in py4j (a Spark job) cancels the jobs
        # instead; the job then stops at its next progress line.
        stop_softly(session.cancel, inside="py4j")
        return _analyze(spark, segments, out, progress, started, session_seconds)
    finally:
        session.close()


def _analyze(spark: SparkSession, segments: Segments, out: Path | None, progress: Progress, started: float,
             session_seconds: float) -> int:
    from .job import run
    from .report import write_report

    result = run(spark, segments, out, progress=progress)
    result.timings["session"] = session_seconds
    if out is None:
        if result.problems:
            for p in result.problems:
                print(f"{p['path']}: {p['kind']} at byte {p['position']} ({p['length']} bytes): "
                      f"{p['code']}: {p['reason']}")
            return 1
        print(f"ok: {result.rows:,} records in {result.files} files, every checksum verified")
        return 0
    with progress.status("plotting and writing the report"):
        written = write_report(result, out)
    result.timings["total"] = time.perf_counter() - started
    progress.step(f"done in {result.timings['total']:.1f} s: {written['report.md']}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
