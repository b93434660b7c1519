"""pub0sub on Spark: a session helper (``sdk.spark.session``) for the analytics job and tests."""
