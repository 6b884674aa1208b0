"""The commands' library functions: run, baseline, build, gate, list --check, and how a run plans and records its
evaluations."""
