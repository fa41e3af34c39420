"""Snapshot stage: turn probe outputs into a typed, schema-valid `Snapshot`, and read/write it."""
