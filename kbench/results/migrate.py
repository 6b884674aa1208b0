"""Run files of earlier versions, brought up to the current one as they are read (kbench.results.storage.load_run).

Version 2 (2026-11-25) gave the figures that version 1 kept in each evaluation's `extra` their own typed fields:
floor, percent_of_floor, accuracy, kernels, peak (v1: peak_bytes), phases, gpu. A v1 figure that is not the
record it should be stays in `extra` as it was: a migration never drops what a run measured.

Version 3 (2026-11-26) keeps each warning as a finding, {"code", "message"} (kbench.results.findings), where
version 2 kept one string, "[code] message".

Version 4 (2026-11-27) gives a `suspect` row's withheld speedups a typed field, `withheld` (version 3 kept them in
`extra` as speedup_vs_eager and speedup_vs_compile), and the diagnostics version 3 kept free-form in `extra` (the
timing protocol, the machine, the processes tried, the sandbox, weights copied; the eager row's output, noise,
priming and regimes) typed records under `diagnostics` (kbench.results.diagnostics). As in version 2, a figure that is
not the record it should be stays in `extra`.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from kbench.results.codec import JsonObject, ProtocolError, decode, to_wire
from kbench.results.diagnostics import (
    MachineState,
    ProcessCheck,
    ReferenceNoise,
    ReferenceOutput,
    TimingProtocol,
)
from kbench.results.figures import Accuracy, Floor, KernelShare, PeakMemory
from kbench.results.findings import from_legacy

# v1 `extra` key -> (v2 field, its type)
V1_FIGURES: dict[str, tuple[str, Any]] = {
    "floor": ("floor", Floor), "percent_of_floor": ("percent_of_floor", float), "accuracy": ("accuracy", Accuracy),
    "kernels": ("kernels", KernelShare), "peak_bytes": ("peak", PeakMemory), "phases": ("phases", dict[str, float]),
    "gpu": ("gpu", str),
}


def _v1_row(row: JsonObject) -> JsonObject:
    extra = dict(row.get("extra") or {})
    moved: JsonObject = {}
    for old, (new, kind) in V1_FIGURES.items():
        if old not in extra or extra[old] is None:
            continue
        try:
            moved[new] = to_wire(decode(kind, extra[old]), kind)
        except ProtocolError:
            continue  # not what v2 types it as: it stays where v1 had it
        del extra[old]
    return {**row, **moved, "extra": extra}


def _v1_to_v2(doc: JsonObject) -> JsonObject:
    return {**doc, "version": 2, "evaluations": [_v1_row(e) for e in doc.get("evaluations", [])]}


def _v2_to_v3(doc: JsonObject) -> JsonObject:
    def finding(w: Any) -> Any:  # anything but a string stays as it is: reading the row then says what is wrong
        if not isinstance(w, str):
            return w
        f = from_legacy(w)
        return {"code": f.code.value, "message": f.message}

    def row(e: JsonObject) -> JsonObject:
        return {**e, "warnings": [finding(w) for w in e.get("warnings", ())]}

    return {**doc, "version": 3, "evaluations": [row(e) for e in doc.get("evaluations", [])]}


WITHHELD = ("speedup_vs_eager", "speedup_vs_compile")  # v3 `extra` keys of a suspect row -> v4 `withheld`


def _v3_output(value: Any) -> Any:
    """v3's output figures (shape, dtype or type, and the degeneracy's three shares side by side) as v4's record."""
    shares = ("constant_pass_share", "zero_share", "output_std")
    found = {k: value[k] for k in shares if k in value} if isinstance(value, dict) else {}
    rest = {k: v for k, v in value.items() if k not in shares} if isinstance(value, dict) else value
    return {**rest, "degeneracy": found} if len(found) == len(shares) else rest


def _v3_protocol(value: Any) -> Any:
    """v3's protocol figures: `retimed` was {"first": "[code] message"}."""
    if isinstance(value, dict) and isinstance(value.get("retimed"), dict):
        return {**value, "retimed": value["retimed"].get("first")}
    return value


# v3 `extra` key -> (its Diagnostics field's type, how v3's value becomes v4's)
V3_DIAGNOSTICS: dict[str, tuple[Any, Callable[[Any], Any]]] = {
    "protocol": (TimingProtocol, _v3_protocol), "machine": (MachineState, lambda v: v),
    "processes": (ProcessCheck, lambda v: v), "sandbox": (str, lambda v: v),
    "state_dict_tensors_copied": (int, lambda v: v), "output": (ReferenceOutput, _v3_output),
    "noise": (ReferenceNoise, lambda v: v), "primed": (bool, lambda v: v), "regimes": (dict[str, str], lambda v: v),
}


def _v3_to_v4(doc: JsonObject) -> JsonObject:
    def row(e: JsonObject) -> JsonObject:
        extra = dict(e.get("extra") or {})
        moved: JsonObject = {}
        if e.get("status") == "suspect" and any(k in extra for k in WITHHELD):
            moved["withheld"] = {k: extra.pop(k, None) for k in WITHHELD}
        diagnostics: JsonObject = {}
        for key, (kind, convert) in V3_DIAGNOSTICS.items():
            if key not in extra:
                continue
            if extra[key] in (None, {}):  # not recorded (a check that did not run)
                del extra[key]
                continue
            try:
                diagnostics[key] = to_wire(decode(kind, convert(extra[key])), kind)
            except ProtocolError:
                continue  # not what v4 types it as: it stays where v3 had it
            del extra[key]
        return {**e, **moved, "diagnostics": diagnostics, "extra": extra}

    return {**doc, "version": 4, "evaluations": [row(e) for e in doc.get("evaluations", [])]}


MIGRATIONS: dict[int, Callable[[JsonObject], JsonObject]] = {1: _v1_to_v2, 2: _v2_to_v3, 3: _v3_to_v4}


def upgrade(doc: JsonObject, to: int) -> JsonObject:
    """`doc` (a parsed run file of version `to` or older; no version: 1) as version `to` has it."""
    version = doc.get("version") or 1
    while version < to:
        doc = MIGRATIONS[version](doc)
        version = doc["version"]
    return doc
