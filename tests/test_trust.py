"""The child's extra checks: a check of the harness's own that cannot run is skipped, not a failure."""

import torch
import torch.nn as nn

from kbench import trust


class NoDouble(nn.Module):
    """A reference that cannot be converted to float64 (as when float64 would not fit in memory)."""

    def forward(self, x):
        return x * 2

    def double(self):
        raise RuntimeError("CUDA out of memory (simulated)")


def test_an_accuracy_check_that_cannot_run_is_skipped_with_a_warning(tmp_path):
    solution = tmp_path / "s.py"
    solution.write_text("# no kernels\n")
    job = {"device": "cpu", "seed": 0, "solution": {"path": str(solution)}}
    result = {"warnings": []}
    trust.trust_checks(job, NoDouble(), lambda x: x * 2, lambda seed: [torch.rand(8)], result)
    assert "accuracy" not in result
    assert result["warnings"] == ["[check_skipped] float64 accuracy could not run: RuntimeError: CUDA out of memory (simulated)"]


def test_accuracy_and_determinism_of_an_honest_candidate(tmp_path):
    job = {"device": "cpu", "seed": 0, "solution": {"path": str(tmp_path / "unused.py")}}
    result = {"warnings": []}
    model = nn.Linear(8, 8)
    trust.trust_checks(job, model, lambda x: model(x), lambda seed: [torch.rand(4, 8)], result)
    assert result["warnings"] == []
    assert result["accuracy"]["solution"] == result["accuracy"]["reference"] < 1e-6
