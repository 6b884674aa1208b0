"""Child processes: isolation, the zygote, GPU slots, executors (local, Ray) and the worker's entry point."""
