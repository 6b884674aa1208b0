"""Problems and solutions on disk: discovery (no user code imported), problem metadata, imports of LLM answers and
KernelBench runs."""
