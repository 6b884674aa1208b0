"""Timers, stopping rules, timing checks and roofline ceilings."""
