"""Studies that tune for real and report trade-offs (search strategies' time against quality)."""
