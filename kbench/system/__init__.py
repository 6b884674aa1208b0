"""The machine and its processes: /proc, CPU and GPU state, escaped processes, the environment and the CUDA toolkit."""
