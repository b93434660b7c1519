"""pub0sub on Spark: the ``pub0sub`` data source and a session helper (``sdk.spark.session``).

``from sdk.spark import Pub0subDataSource; spark.dataSource.register(Pub0subDataSource)``

The data source is imported lazily: ``sdk.spark.session`` must stay importable where
pyspark and pyarrow are not installed.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from .source import Pub0subDataSource

__all__ = ["Pub0subDataSource", "register"]


def register(spark: Any) -> None:
    """Register the ``pub0sub`` format in ``spark`` (needed once per SparkSession)."""
    from .source import Pub0subDataSource

    spark.dataSource.register(Pub0subDataSource)


def __getattr__(name: str) -> Any:
    if name == "Pub0subDataSource":
        from .source import Pub0subDataSource

        return Pub0subDataSource
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
