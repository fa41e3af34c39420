"""Validate stage: the CVF phase pipeline (phases 0-5) and its executors."""
