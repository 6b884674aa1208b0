"""One model's profile: ncu starts the target (kbench.profile.target) in a process group of its own, killed with
everything it started when it ends or runs past its timeout; ncu's CSV becomes a ModelProfile."""

from __future__ import annotations

import subprocess
import sys
import tempfile
from pathlib import Path

from kbench.errors import ProfileError
from kbench.execution.process_tree import kill_tree
from kbench.profile import ncu
from kbench.profile.jobs import TargetJob, TargetResult
from kbench.results.codec import ProtocolError, decode_json, encode
from kbench.results.profiles import ModelProfile

TARGET = (sys.executable, "-m", "kbench.profile.target")
VERSION_TIMEOUT_S = 60
ERROR_PREFIXES = ("==ERROR==", "==WARNING== No kernels")


def tool_version(path: Path) -> str:
    """ncu's version line ("Version 2025.3.1.0 (build ...)"), or "" where it does not answer."""
    try:
        done = subprocess.run([str(path), "--version"], capture_output=True, text=True, timeout=VERSION_TIMEOUT_S,
                              check=False)
    except (OSError, subprocess.SubprocessError):
        return ""
    lines = [line.strip() for line in done.stdout.splitlines() if line.strip()]
    return lines[-1] if lines else ""


class Profiled:
    """One run of ncu over the target: its output files in a temporary folder, and how it ended."""

    def __init__(self, folder: Path) -> None:
        self.job, self.result = folder / "job.json", folder / "result.json"
        self.stdout, self.stderr = folder / "ncu.out", folder / "ncu.err"
        self.returncode: int | None = None

    def run(self, tool: Path, job: TargetJob, env: dict[str, str], timeout_s: float) -> None:
        """Start ncu on the target and wait; the process group is killed on the way out, whatever happened (a
        timeout, an interrupt), so that nothing the target started outlives it.

        Raises:
            ProfileError: the target ran past `timeout_s` seconds.
        """
        self.job.write_text(encode(job), encoding="utf-8")
        with self.stdout.open("wb") as out, self.stderr.open("wb") as err:
            line = ncu.command(tool, [*TARGET, str(self.job), str(self.result)])
            proc = subprocess.Popen(line, stdin=subprocess.DEVNULL, stdout=out, stderr=err, env=env,
                                    start_new_session=True)
            try:
                self.returncode = proc.wait(timeout=timeout_s)
            except subprocess.TimeoutExpired:
                raise ProfileError(f"ncu and its target ran past --timeout ({timeout_s:.0f} s) and were killed"
                                   ) from None
            finally:
                kill_tree(proc.pid)
                proc.wait()

    def outcome(self) -> TargetResult:
        """The target's result file, or a ProfileError saying how ncu or the target ended without one."""
        try:
            return decode_json(TargetResult, self.result.read_text(encoding="utf-8"))
        except (OSError, ProtocolError):
            pass
        said = self.tool_lines() or self.last_lines()
        raise ProfileError(f"ncu's target ended (exit code {self.returncode}) without its result"
                           + (f": {said}" if said else ""))

    def tool_lines(self) -> str:
        """ncu's own errors, and its note that it profiled nothing, on one line."""
        text = self.read(self.stdout) + "\n" + self.read(self.stderr)
        return " / ".join(line.strip() for line in text.splitlines() if line.startswith(ERROR_PREFIXES))[:500]

    def last_lines(self) -> str:
        lines = [line.strip() for line in self.read(self.stderr).splitlines() if line.strip()]
        return lines[-1][:300] if lines else ""

    @staticmethod
    def read(path: Path) -> str:
        try:
            return path.read_text(encoding="utf-8", errors="replace")
        except OSError:
            return ""


def profile_model(tool: Path, job: TargetJob, env: dict[str, str], timeout_s: float, problem: str, solution: str,
                  version: str = "") -> ModelProfile:
    """Profile one model's call under ncu (see kbench.profile.target).

    Args:
        tool: ncu's path (kbench.profile.ncu.find_ncu).
        job: the model, its problem at its size, the seed and settings of an evaluation.
        env: the target's environment (kbench.build.compile.child_env: the solution's build folder, PYTHONPATH).
        timeout_s: seconds before ncu and the target are killed.
        problem, solution: the names the profile is recorded under ("eager" for the reference).
        version: ncu's version line, recorded with the profile.

    Returns:
        The ModelProfile: every kernel of the one call, in launch order, with the sandbox level of its process.

    Raises:
        ProfileError: the target failed (the solution did not load, raised, ran past the timeout), ncu failed, or ncu
            profiled no kernel.
    """
    with tempfile.TemporaryDirectory(prefix="kbench-profile-") as folder:
        run = Profiled(Path(folder))
        run.run(tool, job, env, timeout_s)
        result = run.outcome()
        if result.failure is not None:
            raise ProfileError(f"{problem}/{solution} under ncu: {result.failure}: {result.message.splitlines()[0]}"
                               if result.message else f"{problem}/{solution} under ncu: {result.failure}")
        said = run.tool_lines()
        try:
            kernels = ncu.parse(run.read(run.stdout))
        except ProfileError:
            if not said:
                raise
            kernels = []  # ncu said why it printed no table
        if not kernels:
            raise ProfileError(f"ncu profiled no kernel of {problem}/{solution}" + (f": {said}" if said else ""))
    return ModelProfile(problem, solution, tuple(kernels), version, result.sandbox)
