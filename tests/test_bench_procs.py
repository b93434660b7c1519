"""``sdk/tools/bench/procs.py``: the bench's children are stopped however the bench is stopped."""

from __future__ import annotations

import signal
import subprocess
import sys
import time

from tests.support.procstat import running

# A bench in miniature: two workers, stopped one after the other in a ``finally``; the first
# ignores SIGTERM, so stopping it waits out the grace, and the stop signal lands right there.
SCRIPT = """
import sys, time
from sdk.tools.bench.procs import spawn, stop_process, stop_spawned
from sdk.tools.stopping import run_until_stopped

def main():
    stubborn = spawn([sys.executable, "-c", "import signal, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); "
                      "print('up', flush=True); time.sleep(60)"])
    assert stubborn.stdout.readline() == "up\\n"  # its SIGTERM handler is set
    plain = spawn([sys.executable, "-c", "import time; time.sleep(60)"], capture=False)
    try:
        print(stubborn.pid, plain.pid, flush=True)
    finally:
        print("stopping", flush=True)
        stop_process(stubborn, grace=30)
        stop_process(plain)

run_until_stopped(main, cleanup=None if sys.argv[1] == "none" else lambda: print(stop_spawned(grace=1), flush=True))
"""


def test_workers_a_stop_signal_kept_their_finally_from_stopping_are_stopped_on_the_way_out() -> None:
    proc = subprocess.Popen([sys.executable, "-c", SCRIPT, "sweep"], stdout=subprocess.PIPE, text=True)
    assert proc.stdout is not None
    pids = [int(pid) for pid in proc.stdout.readline().split()]
    assert proc.stdout.readline() == "stopping\n"
    time.sleep(0.5)  # inside stop_process(stubborn)'s wait
    proc.send_signal(signal.SIGTERM)
    out, _ = proc.communicate(timeout=60)
    assert proc.returncode == 0
    assert out.strip() == str(pids), "both were left running by the interrupted finally"
    assert [pid for pid in pids if running(pid)] == []
