"""Runs made on a local Spark standalone cluster: ``pub0sub spark exactly-once`` and ``spark scale``."""
