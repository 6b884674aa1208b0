"""The judge's timing of a solution: calibration, the timed rounds, and its side of each timed call."""
