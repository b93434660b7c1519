"""Durable per-topic logs: segments on disk, recovery, retention, group commit."""
