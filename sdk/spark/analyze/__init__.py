"""``pub0sub analyze``: a Spark job that reads hub data directories and reports per-topic
counts, sizes, rates and publish-to-append latency, with Parquet tables and plots.

Modules: :mod:`.decode` (segment bytes -> Arrow, no Spark), :mod:`.job` (the Spark pipeline),
:mod:`.report` (plots, Markdown, HTML), :mod:`.cli` (the command).
"""
