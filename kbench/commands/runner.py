"""The run's commands under the names they had when they all lived here (see machine, execute, run, baseline...)."""

from kbench.commands.baseline import baseline  # noqa: F401
from kbench.commands.build_and_check import build_only, check_problems, ProblemCheck  # noqa: F401
from kbench.commands.evaluate_all import UNRUNNABLE_HINT  # noqa: F401
from kbench.commands.execute import execute  # noqa: F401
from kbench.commands.machine import (  # noqa: F401
    build_context, PROBE_TIMEOUT_S, probe_environment, resolve_device, resolve_size,
)
from kbench.commands.progress import build_progress, heartbeat, Progress  # noqa: F401
from kbench.commands.run import not_correct, PASSING, run  # noqa: F401
