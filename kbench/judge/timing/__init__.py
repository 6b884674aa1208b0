"""Everything about a timed call: the timers in each `Regime` and the stream gate (with the driver calls under it),
sampling and its stopping rule, calibration and the timing's checks, the timed rounds, and the call timed across the
judge's and the candidate's processes, with the flags a timing raises."""
