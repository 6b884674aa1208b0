"""kbench: validate and time hand-written kernels against their PyTorch reference."""

__version__ = "0.1.0"
