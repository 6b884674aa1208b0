"""Frozen records, statistics derived from raw samples, and the versioned run file."""
