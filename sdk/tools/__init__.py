"""The tools shipped with the SDK, each behind a ``pub0sub`` subcommand: the local cluster
launcher (:mod:`.cluster`, :mod:`.cluster_state`), the demo (:mod:`.demo`), the benchmarks
(:mod:`.bench`), and how their long runs stop (:mod:`.stopping`).  They start hubs only as
processes (``python -m hub``): the SDK imports nothing from ``hub/``.
"""
