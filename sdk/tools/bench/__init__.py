"""``pub0sub bench``: pub0sub measured side by side with Redis, NATS and a raw relay.

Methodology (see ``docs/benchmarks.md``): every system of a scenario runs in
the same invocation, on the same workload, alternating, K times; the median
and spread are reported with the ratio to every other system measured in the
same run.  Absolute numbers on a shared 2-core machine mean little; ratios do.

Modules, one job each:

* :mod:`.results` -- samples, medians, spreads, ratios, JSON lines.
* :mod:`.procs` -- free ports, child processes, deadlines, stopping by PID.
* :mod:`.peers` -- the servers: redis-server, nats-server, the trio relay.
* :mod:`.relay` -- the trio relay itself (``python -m sdk.tools.bench.relay``).
* :mod:`.clients` -- the load workers run as separate processes.
* :mod:`.orchestrate` -- start subscribers, then a publisher, collect results.
* :mod:`.scenarios` -- the registry: scenario id -> measured methods.
* :mod:`.wirebench` -- the ``wire`` codec scenario (in process, no servers).
* :mod:`.cli` -- ``pub0sub bench``.
"""

from __future__ import annotations
