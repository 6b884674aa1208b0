"""The run file's JSON schema, generated from the records: `python -m kbench.results.schema > docs/run.schema.json`.

docs/run.schema.json is its published copy (a test keeps the two equal, and checks run files against it). pydantic
reads the frozen dataclasses of kbench.results.records as they are (kbench.results.codec uses it to check run files
and the parent<->child protocol as they are read).
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Literal

from kbench.config.run_config import RunConfig
from kbench.results.codec import JsonObject
from kbench.results.profiles import ModelProfile
from kbench.results.records import Evaluation
from kbench.results.storage import FORMAT, VERSION, RunProcess


@dataclass(frozen=True)
class RunFile:
    """run.json: the header the runner writes, then one record per evaluation."""

    format: Literal["kbench-run"]
    version: int
    run_id: str
    started: str
    state: Literal["running", "complete", "interrupted"]
    config: RunConfig
    evaluations: list[Evaluation]
    finished: str | None = None
    # Free-form objects in the schema (kbench.results.header gives the shapes kbench writes; older files differ):
    environment: JsonObject = field(default_factory=dict)  # GPU, driver, torch, CUDA, host (kbench.system)
    git: JsonObject | None = None  # commit id and whether the tree was dirty
    selection: JsonObject = field(default_factory=dict)  # the problems and solutions asked for
    problems: JsonObject = field(default_factory=dict)  # per problem: tolerance, precision, sizes used
    process: RunProcess | None = None  # who writes the run (pid, host, boot id); absent in older files
    in_flight: list[dict[str, str]] = field(default_factory=list)  # a running run's evaluations under way
    profiles: list[ModelProfile] = field(default_factory=list)  # kbench profile's kernels per model; absent otherwise
    journal_seq: int = 0  # the last event of the run's journal (journal.jsonl) this file holds; absent in older files


ROW_NAMES = ("problem", "solution", "status", "device", "size")


def run_schema() -> JsonObject:
    """The JSON schema of a run file of this version (a JSON document, as pydantic writes it)."""
    from pydantic import TypeAdapter  # heavy: pydantic on first use; `kbench --help` does not pay for it

    schema = TypeAdapter(RunFile).json_schema(mode="serialization")
    # A row in a run file always names what it evaluated, where and its status (the record's defaults serve the
    # judge's child, whose row the parent completes with them: kbench.commands.evaluation)
    row = schema["$defs"]["Evaluation"]
    row["required"] = sorted({*row.get("required", ()), *ROW_NAMES})
    schema["$id"] = f"https://kbench.invalid/schema/{FORMAT}-{VERSION}.json"
    schema["title"] = f"kbench run file, version {VERSION}"
    return schema


def check(doc: JsonObject) -> None:
    """Raise (pydantic's ValidationError) unless `doc` is a run file this version's schema describes."""
    from pydantic import TypeAdapter  # heavy: pydantic on first use

    TypeAdapter(RunFile).validate_python(doc)


if __name__ == "__main__":
    print(json.dumps(run_schema(), indent=1, sort_keys=True))
