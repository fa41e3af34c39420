"""Report stage: one pure renderer per output format."""
