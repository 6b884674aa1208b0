"""Versioned, atomically written result files: results/<run-id>/run.json, results.csv, results.md."""

from __future__ import annotations

import json
import os
import secrets
import socket
import tempfile
import threading
from collections.abc import Iterator, Mapping
from dataclasses import asdict, dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import cast

from kbench.errors import ResultsError, UsageError
from kbench.results import migrate
from kbench.results.codec import JsonObject
from kbench.results.header import RunHeader
from kbench.results.profiles import ModelProfile, profiles_of, profiles_to_json
from kbench.results.records import Evaluation

FORMAT = "kbench-run"
VERSION = 3  # kbench.results.migrate brings older files up to it
RUN_FILE = "run.json"
BASELINES = "baselines"  # results/baselines/<name>.json: curated runs kept in git
BOOT_ID = Path("/proc/sys/kernel/random/boot_id")  # Linux: changes at every boot, so a pid is only meaningful with it
PROC = Path("/proc")


def new_run_id(now: datetime | None = None) -> str:
    """Sortable by time: 20261122-071500-3fa2 (UTC, then a random suffix against collisions)."""
    now = now or datetime.now(timezone.utc)
    return f"{now:%Y%m%d-%H%M%S}-{secrets.token_hex(2)}"


def _read_umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


FILE_MODE = 0o666 & ~_read_umask()  # read once at import: os.umask can only be read by setting it


def atomic_write(path: Path, text: str) -> None:
    """Write to a temporary file beside `path`, then rename: readers see the old or the new file."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", dir=path.parent)
    try:
        os.fchmod(fd, FILE_MODE)  # mkstemp makes 0600; results are ordinary files
        with os.fdopen(fd, "w", encoding="utf-8") as handle:
            handle.write(text)
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


class RunStore:
    """The results of one run, rewritten in full after every evaluation so none is ever lost."""

    def __init__(self, directory: Path, header: RunHeader) -> None:
        self.directory = directory
        self.header = header
        self.evaluations: list[Evaluation] = []
        # Evaluations under way, written before each starts (`begin`): a run whose process dies leaves them in its
        # file, and a resume records each as crashed (`lost`) instead of running it again first.
        self.in_flight: list[dict[str, str]] = []
        self.lost: list[dict[str, str]] = []  # what the run was evaluating when its process died (on resume)
        self.profiles: list[ModelProfile] = []  # kbench profile's (run.json's optional `profiles`)
        self._lock = threading.Lock()

    @classmethod
    def create(cls, results_dir: Path, header: RunHeader) -> RunStore:
        if (results_dir / "__init__.py").is_file():
            raise UsageError(f"{results_dir} is a Python package, not a results folder: run kbench from the "
                             "repository root or pass --results-dir")
        run_id = new_run_id()
        directory = results_dir / run_id
        try:
            directory.mkdir(parents=True, exist_ok=False)
        except OSError as exc:
            raise ResultsError(f"Cannot create the results folder {directory}: {exc.strerror}") from None
        now = datetime.now(timezone.utc).isoformat(timespec="seconds")
        store = cls(directory, {"format": FORMAT, "version": VERSION, "run_id": run_id, "started": now,
                                "process": asdict(this_process()), **header})
        store.save(state="running")
        return store

    @classmethod
    def resume(cls, path: Path) -> RunStore:
        """Reopen an earlier run (e.g. an interrupted one) to add the evaluations it did not finish."""
        doc, evaluations = load_run(path)
        directory = path if path.is_dir() else path.parent
        # The header as the run wrote it (kbench.commands.execute): the file's keys but its rows and its state.
        header = cast(RunHeader, {k: v for k, v in doc.items()
                                  if k not in ("evaluations", "state", "finished", "in_flight", "profiles")})
        header["process"] = asdict(this_process())  # the resuming process writes the run from now on
        store = cls(directory, header)
        store.evaluations = list(evaluations)
        store.profiles = profiles_of(doc)
        store.lost = [dict(x) for x in doc.get("in_flight") or [] if isinstance(x, dict)]
        return store  # nothing is written until the caller has accepted it (same machine, same torch)

    @property
    def run_id(self) -> str:
        return str(self.header["run_id"])

    def begin(self, problem: str, solution: str) -> None:
        """Note an evaluation as under way (in the file, before it starts)."""
        with self._lock:
            self.in_flight.append({"problem": problem, "solution": solution,
                                   "started": datetime.now(timezone.utc).isoformat(timespec="seconds")})
            self._save("running")

    def add(self, evaluation: Evaluation) -> None:
        with self._lock:
            self.in_flight = [x for x in self.in_flight
                              if (x["problem"], x["solution"]) != (evaluation.problem, evaluation.solution)]
            self.evaluations.append(evaluation)
            self._save("running")

    def document(self, state: str) -> JsonObject:
        """run.json's content: the header, the state, the evaluations as JSON, what is under way."""
        doc: JsonObject = {**self.header, "state": state, "evaluations": [e.to_json() for e in self.evaluations]}
        if self.profiles:
            doc["profiles"] = profiles_to_json(self.profiles)
        if state == "running" and self.in_flight:
            doc["in_flight"] = list(self.in_flight)
        if state != "running":
            doc["finished"] = datetime.now(timezone.utc).isoformat(timespec="seconds")
        return doc

    def save(self, state: str) -> None:
        with self._lock:
            self._save(state)

    def _save(self, state: str) -> None:
        atomic_write(self.directory / RUN_FILE, json.dumps(self.document(state), indent=1, default=str) + "\n")

    def finish(self, state: str = "complete") -> None:
        """The run file in its final state (the tables beside it: kbench.reports.tables.write_tables)."""
        self.save(state)


@dataclass(frozen=True)
class RunProcess:
    """Who writes a run (run.json's `process`): a reader can tell a run still going from one whose process died."""

    pid: int
    host: str
    boot_id: str = ""  # Linux's /proc/sys/kernel/random/boot_id; "" where it cannot be read


def _boot_id() -> str:
    try:
        return BOOT_ID.read_text(encoding="ascii").strip()
    except (OSError, UnicodeDecodeError):
        return ""


def this_process() -> RunProcess:
    return RunProcess(pid=os.getpid(), host=socket.gethostname(), boot_id=_boot_id())


def recorded_process(doc: Mapping[str, object]) -> RunProcess | None:
    """The process a run file names, or None (files written before kbench recorded it, or a malformed record)."""
    raw = doc.get("process")
    if not isinstance(raw, dict):
        return None
    try:
        return RunProcess(pid=int(raw["pid"]), host=str(raw["host"]), boot_id=str(raw.get("boot_id") or ""))
    except (KeyError, TypeError, ValueError):
        return None


def _pid_exists(pid: int) -> bool:
    if PROC.is_dir():
        return (PROC / str(pid)).exists()
    try:
        os.kill(pid, 0)  # no /proc (macOS): signal 0 only asks whether the process exists
    except PermissionError:
        return True
    except (OSError, OverflowError):
        return False
    return True


def process_alive(process: RunProcess) -> bool:
    """Whether the process still runs: it ran on this host, in this boot, and its pid exists. A process on another
    host cannot be checked from here and does not count as alive."""
    here = this_process()
    return (process.host == here.host and process.boot_id == here.boot_id and process.pid > 0
            and _pid_exists(process.pid))


def run_state(doc: Mapping[str, object]) -> str:
    """What a run file's state means now: complete, interrupted, running (marked running, and its process is alive)
    or incomplete (marked running or not marked, and its process is gone or not recorded: it died unfinished)."""
    state = doc.get("state")
    if state in ("complete", "interrupted"):
        return str(state)
    process = recorded_process(doc)
    return "running" if state == "running" and process is not None and process_alive(process) else "incomplete"


def load_run(path: Path) -> tuple[JsonObject, list[Evaluation]]:
    """Read a run.json (or a run directory) of any known version."""
    file = path / RUN_FILE if path.is_dir() else path
    try:
        doc = json.loads(file.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise ResultsError(f"No results at {file}") from None
    except (OSError, json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise ResultsError(f"{file} is not a readable kbench result ({exc})") from None
    if not isinstance(doc, dict) or doc.get("format") != FORMAT:
        raise ResultsError(f"{file} is not a kbench run file")
    if doc.get("version", 0) > VERSION:
        raise ResultsError(f"{file} has format version {doc['version']}; this kbench reads up to {VERSION}. "
                           "Upgrade kbench.")
    try:
        doc = migrate.upgrade(doc, VERSION)
        evaluations = [Evaluation.from_json(e) for e in doc.get("evaluations", [])]
    except (KeyError, TypeError, ValueError) as exc:
        raise ResultsError(f"{file} has a malformed evaluation ({exc})") from None
    return doc, evaluations


@dataclass(frozen=True)
class LoadedRun:
    path: Path
    label: str
    doc: JsonObject  # the run file as read (brought up to this version), its evaluations also as records below
    evaluations: tuple[Evaluation, ...]


def load(path: Path) -> LoadedRun:
    doc, evaluations = load_run(path)
    return LoadedRun(path, str(doc.get("run_id", path)), doc, tuple(evaluations))


def run_dirs(results_dir: Path) -> list[Path]:
    """Run directories under results_dir, oldest first (run ids sort by time)."""
    if not results_dir.is_dir():
        return []
    return sorted(d for d in results_dir.iterdir() if (d / RUN_FILE).is_file() and d.name != BASELINES)


def resolve(ref: str, results_dir: Path) -> Path:
    """A run id, a run directory, a run.json, a baseline name (results/baselines/<name>.json) or file."""
    for candidate in (Path(ref), results_dir / ref, results_dir / BASELINES / f"{ref}.json"):
        if candidate.is_file() or (candidate / RUN_FILE).is_file():
            return candidate
    known = ", ".join(d.name for d in run_dirs(results_dir)[-5:]) or "(none)"
    raise UsageError(f"No run or baseline '{ref}' under {results_dir}. Recent runs: {known}")


def _readable(results_dir: Path, warn: list[str]) -> Iterator[LoadedRun]:
    """Readable runs, newest first; unreadable ones are skipped with a warning, never a crash."""
    for directory in reversed(run_dirs(results_dir)):
        try:
            yield load(directory)
        except ResultsError as exc:
            warn.append(f"skipped {directory.name}: {exc}")


def latest_run(results_dir: Path, warn: list[str]) -> LoadedRun:
    for run in _readable(results_dir, warn):
        return run
    raise UsageError(f"No readable run under {results_dir}. Start one with: kbench run")


def latest_two(results_dir: Path, warn: list[str]) -> tuple[LoadedRun, LoadedRun]:
    """(the run before the latest, the latest), both readable."""
    runs = []
    for run in _readable(results_dir, warn):
        if not run.evaluations and run.doc.get("profiles"):  # a `kbench profile` run: kernels, no rows to compare
            continue
        runs.append(run)
        if len(runs) == 2:
            return runs[1], runs[0]
    raise UsageError(f"Need two readable runs under {results_dir} to compare; found {len(runs)}. "
                     "Name them: kbench compare A B")
