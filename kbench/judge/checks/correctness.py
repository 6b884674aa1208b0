"""Seeded correctness trials: fresh inputs per seed, the candidate on its own copies, then the reference."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import torch

from kbench.judge.checks.comparison import chunk_elements, compare, memory_budget, same_bits
from kbench.results.findings import Finding, FindingCode
from kbench.results.records import TrialResult

# Bound at import, before any solution runs (see kbench.judge.checks.comparison).
_tensor_type = torch.Tensor


def clone_inputs(inputs: Sequence[Any]) -> list[Any]:
    return [x.clone() if isinstance(x, _tensor_type) else x for x in inputs]


def inputs_unchanged(before: Sequence[Any], after: Sequence[Any]) -> bool:
    """True when every tensor input is bit-identical after the call (NaNs compared as equal)."""
    for b, a in zip(before, after):
        if isinstance(b, _tensor_type) and not same_bits(b, a, chunk_elements(memory_budget(b.device))):
            return False
    return True


CandidateCall = Callable[[list[Any]], tuple[Any, bool]]
"""candidate(inputs) -> (outputs, whether it changed its copy of the inputs); `inputs` themselves stay untouched."""


def on_copies(model: Callable[..., Any]) -> CandidateCall:
    """A model of this process as a CandidateCall: called on clones of the inputs, compared with them afterwards."""
    def call(inputs: list[Any]) -> tuple[Any, bool]:
        copies = clone_inputs(inputs)
        out = model(*copies)
        return out, not inputs_unchanged(inputs, copies)

    return call


def run_trials(
    make_inputs: Callable[[int], list[Any]],
    candidate: CandidateCall,
    reference: Callable[..., Any],
    seeds: Sequence[int],
    atol: float,
    rtol: float,
    sync: Callable[[], None] = lambda: None,
) -> tuple[list[TrialResult], list[Finding]]:
    """One trial per seed: fresh inputs, the candidate first (on its own copy), then the reference on the inputs.

    The candidate runs first so that it cannot pick up the reference's output from freed memory
    of the same trial; a fresh seed per trial makes stale results from an earlier trial wrong.
    `sync` waits for all device work after the candidate, so work it left on another stream is done
    before its output is read (the timer, not the verdict, is what such work fools). The reference
    gets the inputs themselves (nothing reads them after it): no copy of kbench's own beyond the candidate's.
    Returns the trials (stopping at the first failure) and warnings (e.g. inputs modified in place).
    """
    results: list[TrialResult] = []
    warnings: list[Finding] = []
    for seed in seeds:
        inputs = make_inputs(seed)
        cand_out, changed = candidate(inputs)
        sync()
        if changed and not warnings:
            warnings.append(Finding(FindingCode.MODIFIES_INPUTS, "the solution modifies its inputs in place"))
        ref_out = reference(*inputs)
        del inputs
        sync()
        ok, fig = compare(cand_out, ref_out, atol, rtol)
        results.append(
            TrialResult(
                seed=seed,
                passed=ok,
                max_abs_err=fig.get("max_abs_err"),
                max_rel_err=fig.get("max_rel_err"),
                mismatched=fig.get("mismatched"),
                numel=fig.get("numel"),
                chunks=fig.get("chunks"),
                message=fig.get("message", ""),
            )
        )
        del cand_out, ref_out
        if not ok:
            break
    return results, warnings
