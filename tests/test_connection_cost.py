"""``python -m hub.tools.connection_cost`` against a real hub: every connection is accounted for."""

from __future__ import annotations

from hub.tools.connection_cost import measure


def test_malformed_connections_are_each_a_session_with_a_protocol_error_or_refused_at_the_rate() -> None:
    row = measure(400, "junk")  # faster than the default per-address rate after its burst of 200
    sessions, refused = row["hub_sessions_opened"], row["hub_refused_connect_rate"]
    assert sessions + refused == 400, row
    assert refused > 0 and row["hub_protocol_errors"] == sessions, row
    assert row["hub_cpu_us_per_connection"] > 0, row
