"""Compiling solutions into the source-hash cache, several at once, each in its own child."""
