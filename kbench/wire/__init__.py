"""The parent <-> child protocol: the typed job records sent to a child and the typed results it answers with."""
