"""Versioned, atomically written result files: results/<run-id>/run.json, results.csv, results.md."""

from __future__ import annotations

import json
import os
import secrets
import socket
import tempfile
import threading
import time
from collections.abc import Callable, Iterator, Mapping
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
VERSION = 4  # kbench.results.migrate brings older files up to it
RUN_FILE = "run.json"
# What happened since run.json was last written in full: one JSON line an event (an evaluation begun, one finished),
# appended and flushed to disk as it happens, so that no finished evaluation is lost while run.json itself is
# rewritten at most every FLUSH_INTERVAL_S (a rewrite after every evaluation cost O(rows) each, O(rows^2) a run:
# 47 s of a 200-row run's parent on a 2-core machine, and its lock held each job's start back).
JOURNAL_FILE = "journal.jsonl"
FLUSH_INTERVAL_S = 10.0
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
    """The results of one run: run.json, rewritten in full when the run opens, closes and at most every
    FLUSH_INTERVAL_S in between, and its journal (JOURNAL_FILE), to which every evaluation is appended as it is
    begun and as it finishes, so that none is ever lost. `load_run` reads the two as one document."""

    def __init__(self, directory: Path, header: RunHeader, clock: Callable[[], float] = time.monotonic) -> None:
        self.directory = directory
        self.header = header
        self.evaluations: list[Evaluation] = []
        # Evaluations under way, journaled before each starts (`begin`): a run whose process dies leaves them in its
        # file, and a resume records each as crashed (`lost`) instead of running it again first.
        self.in_flight: list[dict[str, str]] = []
        self.lost: list[dict[str, str]] = []  # what the run was evaluating when its process died (on resume)
        self.profiles: list[ModelProfile] = []  # kbench profile's (run.json's optional `profiles`)
        self._lock = threading.Lock()
        self._clock = clock
        self._texts: dict[int, str] = {}  # each evaluation's JSON, made once (by id: the records hold dicts)
        self._seq = 0  # the journal's last event
        self._flushed = clock()

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
                                  if k not in ("evaluations", "state", "finished", "in_flight", "profiles",
                                               "journal_seq")})
        header["process"] = asdict(this_process())  # the resuming process writes the run from now on
        store = cls(directory, header)
        store.evaluations = list(evaluations)
        store.profiles = profiles_of(doc)
        store.lost = [dict(x) for x in doc.get("in_flight") or [] if isinstance(x, dict)]
        store._seq = doc["journal_seq"] if isinstance(doc.get("journal_seq"), int) else 0
        return store  # nothing is written until the caller has accepted it (same machine, same torch)

    @property
    def run_id(self) -> str:
        return str(self.header["run_id"])

    def begin(self, problem: str, solution: str) -> None:
        """Note an evaluation as under way (journaled before it starts)."""
        entry = {"problem": problem, "solution": solution,
                 "started": datetime.now(timezone.utc).isoformat(timespec="seconds")}
        with self._lock:
            self.in_flight.append(entry)
            self._journal("begin", json.dumps(entry))

    def add(self, evaluation: Evaluation) -> None:
        """Keep a finished evaluation: journaled at once, in run.json by the next rewrite."""
        text = json.dumps(evaluation.to_json(), default=str)
        with self._lock:
            self.in_flight = [x for x in self.in_flight
                              if (x["problem"], x["solution"]) != (evaluation.problem, evaluation.solution)]
            self.evaluations.append(evaluation)
            self._texts[id(evaluation)] = text
            self._journal("evaluation", text)
            if self._clock() - self._flushed >= FLUSH_INTERVAL_S:
                self._save("running")

    def save(self, state: str) -> None:
        """run.json rewritten in full now (and the journal emptied: the file holds all it said)."""
        with self._lock:
            self._save(state)

    def _save(self, state: str) -> None:
        atomic_write(self.directory / RUN_FILE, self._document_text(state))
        self._flushed = self._clock()
        try:  # run.json records the journal's last event it holds: events up to it are read from run.json alone
            (self.directory / JOURNAL_FILE).unlink()
        except FileNotFoundError:
            pass

    def _document_text(self, state: str) -> str:
        """run.json's text: the header and the rest indented by json, each evaluation's JSON as `add` made it."""
        doc: JsonObject = {**self.header, "state": state}
        if self.profiles:
            doc["profiles"] = profiles_to_json(self.profiles)
        if state == "running" and self.in_flight:
            doc["in_flight"] = list(self.in_flight)
        if state != "running":
            doc["finished"] = datetime.now(timezone.utc).isoformat(timespec="seconds")
        doc["journal_seq"] = self._seq
        texts = {id(e): self._texts.get(id(e)) or json.dumps(e.to_json(), default=str) for e in self.evaluations}
        self._texts = texts  # rows dropped from `evaluations` (a resume's crashed rows run again) go from the cache
        head = json.dumps(doc, indent=1, default=str)
        rows = ",\n  ".join(texts[id(e)] for e in self.evaluations)
        return head[:-2] + (f',\n "evaluations": [\n  {rows}\n ]\n}}\n' if rows else ',\n "evaluations": []\n}\n')

    def _journal(self, kind: str, payload: str) -> None:
        """Append one event (`kind`: begin or evaluation; `payload`: its JSON) to the journal, on disk before this
        returns."""
        self._seq += 1
        with open(self.directory / JOURNAL_FILE, "a", encoding="utf-8") as handle:
            handle.write(f'{{"seq": {self._seq}, "{kind}": {payload}}}\n')
            handle.flush()
            os.fsync(handle.fileno())

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
    _replay_journal(file, doc)
    try:
        doc = migrate.upgrade(doc, VERSION)
        evaluations = [Evaluation.from_json(e) for e in doc.get("evaluations", [])]
    except (KeyError, TypeError, ValueError) as exc:
        raise ResultsError(f"{file} has a malformed evaluation ({exc})") from None
    return doc, evaluations


def _replay_journal(file: Path, doc: JsonObject) -> None:
    """Add to `doc` (a run.json as read) the events its journal holds beyond it (RunStore): the evaluations finished
    and begun since run.json was last written. A line cut short by a dying process is the last one and is skipped."""
    journal = file.parent / JOURNAL_FILE
    if file.name != RUN_FILE or not journal.is_file():
        return
    seen = doc.get("journal_seq") if isinstance(doc.get("journal_seq"), int) else 0
    rows, flying = list(doc.get("evaluations") or []), list(doc.get("in_flight") or [])
    for line in journal.read_text(encoding="utf-8", errors="replace").splitlines():
        try:
            event = json.loads(line)
        except json.JSONDecodeError:
            continue
        if not isinstance(event, dict) or not isinstance(event.get("seq"), int) or event["seq"] <= seen:
            continue
        seen = event["seq"]
        if isinstance(event.get("begin"), dict):
            flying.append(event["begin"])
        elif isinstance(event.get("evaluation"), dict):
            row = event["evaluation"]
            rows.append(row)
            flying = [x for x in flying if (x.get("problem"), x.get("solution")) != (row.get("problem"),
                                                                                    row.get("solution"))]
    doc["evaluations"], doc["journal_seq"] = rows, seen
    if flying:
        doc["in_flight"] = flying
    else:
        doc.pop("in_flight", None)


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
