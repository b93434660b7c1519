"""``sdk/tools/bench/procs.py``: the bench's children are stopped however the bench is stopped."""

from __future__ import annotations

import signal
import subprocess
import sys
import time

from sdk.tools.bench.procs import stop_process
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


def test_a_child_is_stopped_and_reaped_when_an_interrupt_left_popens_wait_lock_held() -> None:
    # A KeyboardInterrupt landing in Popen.poll() right after it took its internal lock leaves
    # the lock held: Popen.poll() then says "running" and Popen.wait() times out for ever.
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    child._waitpid_lock.acquire()  # type: ignore[attr-defined]  # what that interrupt leaves
    started = time.monotonic()
    stop_process(child, grace=2)
    assert child.returncode == -signal.SIGTERM
    assert time.monotonic() - started < 2, "stopped only by SIGKILL after the grace"
    assert not running(child.pid)
    stop_process(child)  # once reaped, stopping again is a no-op


# A measurement whose unwinding after the stop signal raises something else (a server that would
# not stop, as in CI): the bench must end there, not report one failed measurement and go on.
STOPPED_MEASUREMENT = """
import os, signal, time
from sdk.tools.bench.registry import Method, Params, Scenario, register_scenario
from sdk.tools.bench.results import FigureSpec, Measurement
from sdk.tools.bench.runner import run
from sdk.tools.stopping import run_until_stopped

def measure(server, params):
    try:
        os.kill(os.getpid(), signal.SIGINT)
        time.sleep(5)
    finally:
        raise RuntimeError("a server would not stop")

register_scenario(Scenario(id="X1", title="stopped", figures=(FigureSpec(name="n", unit="1"),), defaults=lambda p: p,
                           methods=[Method(system="x", method="m", tooling="-", measure=measure)]))
rounds = []
outcome = run_until_stopped(lambda: run(["X1"], Params(), repeat=3, progress=rounds.append))
print(outcome.signal, len(rounds), flush=True)
"""


def test_a_stop_whose_unwinding_raised_something_else_ends_the_bench_run() -> None:
    done = subprocess.run([sys.executable, "-c", STOPPED_MEASUREMENT], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["SIGINT", "0"], (done.stdout, done.stderr)


# A stop signal right after a measurement spawned a worker, before any ``try`` knows it (the
# window ``children_stopped`` closes): the worker must be gone before the server stops, or it
# meets a closed port and prints a traceback into the bench's stderr.
WORKER_BEFORE_SERVER = """
import os, signal, sys, time
from sdk.tools.bench.procs import spawn, stop_process, stop_spawned
from sdk.tools.bench.registry import Method, Params, Scenario, register_scenario, register_server
from sdk.tools.bench.results import FigureSpec
from sdk.tools.bench.runner import run
from sdk.tools.stopping import run_until_stopped

spawned = []

class Server:
    def start(self):
        self.proc = spawn([sys.executable, "-c", "import time; time.sleep(60)"], capture=False)
    def stop(self):
        print("worker alive when the server stopped:", spawned[0].poll() is None, flush=True)
        stop_process(self.proc)

def measure(server, params):
    spawned.append(spawn([sys.executable, "-c", "import time; time.sleep(60)"], capture=False))
    os.kill(os.getpid(), signal.SIGINT)
    time.sleep(5)

register_server("s", Server)
register_scenario(Scenario(id="X2", title="stopped", figures=(FigureSpec(name="n", unit="1"),), defaults=lambda p: p,
                           methods=[Method(system="x", method="m", tooling="-", server="s", measure=measure)]))
outcome = run_until_stopped(lambda: run(["X2"], Params(), repeat=1), cleanup=stop_spawned)  # as pub0sub bench
print(outcome.signal, flush=True)
"""


def test_a_measurements_workers_are_stopped_before_its_server() -> None:
    done = subprocess.run([sys.executable, "-c", WORKER_BEFORE_SERVER], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines() == ["worker alive when the server stopped: False", "SIGINT"], (done.stdout,
                                                                                                   done.stderr)


# A stop signal inside ``stop_deferred`` (as inside ``spawn``'s Popen) raises only at the block's end.
DEFERRED = """
import os, signal
from sdk.tools.stopping import run_until_stopped, stop_deferred

steps = []

def main():
    with stop_deferred():
        os.kill(os.getpid(), signal.SIGTERM)
        steps.append("after the signal, inside")
    steps.append("after the block")

outcome = run_until_stopped(main)
print(outcome.signal, steps, flush=True)
"""


def test_a_stop_signal_inside_stop_deferred_raises_at_the_end_of_the_block() -> None:
    done = subprocess.run([sys.executable, "-c", DEFERRED], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "SIGTERM ['after the signal, inside']", (done.stdout, done.stderr)
