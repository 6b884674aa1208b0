"""The one exception family the library raises for user-facing problems."""


class KbenchError(Exception):
    """A problem the user can fix; the CLI prints its message on one line and exits non-zero."""

    exit_code = 1


class UsageError(KbenchError):
    """Bad input: unknown names, missing files, contradictory options."""

    exit_code = 2


class DiscoveryError(UsageError):
    """A problem or solution could not be found or does not follow the file contract."""


class ResultsError(KbenchError):
    """A results file is missing, unreadable or of an unknown format."""


class Interrupted(KbenchError):
    """The run was stopped by a signal; what finished is saved."""

    exit_code = 130


class ProfileError(KbenchError):
    """Nsight Compute (ncu) failed, or its output is not what kbench profile reads."""


class ClusterError(KbenchError):
    """The Ray cluster of `--executor ray` could not be started or reached."""


class ImportFailure(KbenchError):
    """An LLM response holds no importable ModelNew: no code, cut off, or not valid Python."""
