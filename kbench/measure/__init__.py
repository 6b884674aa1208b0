"""The hardware floor: a problem's work against the machine's ceilings (the ceilings are timed in kbench.judge)."""
