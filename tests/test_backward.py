"""--backward: forward and backward judged and timed as one call (kbench.judge.backward, docs/judge.md "Backward")."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
import torch
from typer.testing import CliRunner

from kbench.cli import app
from kbench.config.run_config import RunConfig
from kbench.judge import backward
from kbench.judge.checks.comparison import compare
from kbench.judge.verdict import Verdict
from kbench.problems.discovery import find_problem
from kbench.problems.metadata import DiscoveryError
from kbench.results.records import Status
from kbench.results.storage import load_run
from tests.conftest import ROOT

FIXTURES = ROOT / "tests" / "fixtures"


class Tiny(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.linear = torch.nn.Linear(4, 3)

    def forward(self, x):
        return torch.tanh(self.linear(x)) * 2


def test_one_call_returns_the_output_and_every_gradient_under_its_name():
    torch.manual_seed(0)
    model = Tiny()
    x, upstream = torch.randn(5, 4), torch.randn(5, 3)
    out = backward.Gradients(model)(x, upstream)
    assert out.labels == ("output", "the gradient of input 0", "the gradient of linear.weight",
                          "the gradient of linear.bias")
    leaf = x.clone().requires_grad_()
    expected = model(leaf)
    expected.backward(upstream)
    assert torch.equal(out[0], expected.detach())
    assert torch.allclose(out[1], leaf.grad) and torch.allclose(out[2], model.linear.weight.grad)
    assert torch.allclose(out[3], model.linear.bias.grad)
    assert not out[0].requires_grad and x.grad is None  # nothing accumulates on the caller's tensors


def test_no_gradient_accumulates_between_calls():
    model = Tiny()
    x, upstream = torch.randn(5, 4), torch.randn(5, 3)
    wrapped = backward.Gradients(model)
    first, second = wrapped(x, upstream), wrapped(x, upstream)
    assert all(torch.equal(a, b) for a, b in zip(first, second))
    assert model.linear.weight.grad is None


def test_a_detached_output_is_incorrect_for_a_solution_and_not_run_for_the_reference():
    class Detached(Tiny):
        def forward(self, x):
            return super().forward(x).detach()

    x, upstream = torch.randn(5, 4), torch.randn(5, 3)
    with pytest.raises(Verdict) as found:
        backward.Gradients(Detached())(x, upstream)
    assert found.value.status == Status.INCORRECT and "no gradient path" in found.value.message
    with pytest.raises(Verdict) as found:
        backward.Gradients(Detached(), reference=True)(x, upstream)
    assert found.value.status == Status.NOT_RUN and found.value.message.startswith("the reference cannot be judged")


def test_a_model_without_one_of_the_reference_parameters_is_incorrect_naming_it():
    with pytest.raises(Verdict) as found:
        backward.Gradients(Tiny(), names=("linear.weight", "scale"))
    assert found.value.status == Status.INCORRECT and "'scale'" in found.value.message


def test_the_weights_keep_the_wrapped_model_names():
    model = Tiny()
    wrapped = backward.Gradients(model)
    assert list(wrapped.state_dict()) == ["linear.weight", "linear.bias"]
    wrapped.load_state_dict({k: torch.zeros_like(v) for k, v in model.state_dict().items()})
    assert float(model.linear.weight.detach().abs().sum()) == 0.0


def test_the_upstream_gradient_is_drawn_fresh_for_each_seed_and_the_same_for_the_same_seed():
    def make(seed):
        torch.manual_seed(seed)
        return [torch.randn(5, 4)]

    draw = backward.with_upstream(make, Tiny())
    a, b, again = draw(1), draw(2), draw(1)
    assert a[-1].shape == (5, 3) and not torch.equal(a[-1], b[-1]) and torch.equal(a[-1], again[-1])


def test_a_reference_without_one_floating_tensor_output_is_not_run():
    class Pair(Tiny):
        def forward(self, x):
            return x, x

    with pytest.raises(Verdict) as found:
        backward.with_upstream(lambda seed: [torch.randn(2, 4)], Pair())
    assert found.value.status == Status.NOT_RUN and "returns tuple" in found.value.message


def test_a_mismatch_names_the_gradients_that_differ():
    ref = backward.labeled([torch.zeros(3), torch.zeros(2)], ["output", "the gradient of w"])
    ok, figures = compare((torch.zeros(3), torch.ones(2)), ref, 1e-3, 1e-3)
    assert not ok and figures["message"].startswith("the gradient of w: 2 of 5 elements")


def test_torch_compile_of_a_backward_reference_keeps_its_parameter_names():
    wrapped = backward.Gradients(Tiny(), reference=True)
    compiled = backward.compiled(wrapped)
    assert isinstance(compiled, backward.Gradients) and compiled.names == wrapped.names


def test_problem_toml_sets_a_default_the_command_line_overrides(tmp_path: Path):
    (tmp_path / "p").mkdir()
    (tmp_path / "p" / "model.py").write_text("class Model: pass\ndef get_inputs(): pass\ndef get_init_inputs(): pass\n")
    (tmp_path / "p" / "problem.toml").write_text("backward = true\n")
    problem = find_problem("p", tmp_path)
    assert problem.backward and RunConfig().backward_for(problem)
    assert not RunConfig(backward=False).backward_for(problem)
    (tmp_path / "p" / "problem.toml").write_text('backward = "yes"\n')
    with pytest.raises(DiscoveryError, match="backward is 'yes'; it takes true or false"):
        find_problem("p", tmp_path)


def test_a_backward_run_gives_each_fixture_its_verdict(tmp_path: Path):
    """One CPU run: honest copies (autograd's backward and a custom Function's) correct; a wrong backward, a detached
    output, a backward that caches its first gradient and a gradient of the wrong shape incorrect, each saying why."""
    solutions = tmp_path / "solutions"
    shutil.copytree(FIXTURES / "backward", solutions)
    result = CliRunner().invoke(app, [
        "run", "-p", "tiny", "--problems-dir", str(FIXTURES / "problems"), "--solutions-dir", str(solutions),
        "--device", "cpu", "--backward", "--trials", "2", "--max-time", "0.2", "--no-compile-baseline",
        "--results-dir", str(tmp_path / "results"), "--no-progress"])
    assert "calls forward+backward (every row)" in result.output, result.output
    rows = {e.solution: e for e in load_run(next((tmp_path / "results").iterdir()))[1]}
    for name in ("eager", "honest_copy", "honest_function"):
        assert rows[name].status == Status.CORRECT and rows[name].backward, (name, rows[name].message)
    wrong = {name: rows[name] for name in ("wrong_backward", "caches_gradients", "detached", "wrong_gradient_shape")}
    assert all(row.status == Status.INCORRECT for row in wrong.values()), {n: r.message for n, r in wrong.items()}
    assert "the gradient of input 0" in wrong["wrong_backward"].message
    assert "output" not in wrong["wrong_backward"].message.split(":")[0]  # the forward is right: not named
    assert "trial 2" in wrong["caches_gradients"].message or "the gradient" in wrong["caches_gradients"].message
    assert "no gradient path" in wrong["detached"].message
    assert "invalid gradient" in wrong["wrong_gradient_shape"].message
    assert result.exit_code == 1


def test_the_provenance_says_what_a_timed_call_holds():
    from kbench.reports.caveats import provenance
    from kbench.results.records import Evaluation

    def rows(*backward):
        return [Evaluation(problem="p", solution=f"s{i}", status=Status.CORRECT, device="cpu", size="small",
                           backward=b) for i, b in enumerate(backward)]

    assert provenance({}, rows(False, False)).calls == "the forward"
    assert provenance({}, rows(True, True)).calls.startswith("forward and backward as one call")
    assert provenance({}, rows(True, False)).calls.startswith("forward and backward on 1 of 2 row(s)")
    assert ("calls", "the forward") in provenance({}, rows(False)).lines()


def test_the_floor_of_a_backward_row_is_the_forwards(monkeypatch, tmp_path):
    """The FLOP counter's module hooks refuse autograd.grad (every eager row failed on the H100): the floor counts the
    wrapped model's forward on the inputs without the upstream gradient, a lower bound of forward and backward."""
    from kbench.judge import ceilings
    from kbench.judge import reference as reference_child
    from kbench.measure import roofline
    from kbench.wire.jobs import ProblemRef, ReferenceJob

    seen = {}

    def work(model, inputs, device):
        seen["model"], seen["inputs"] = model, inputs
        return "work"

    monkeypatch.setattr(roofline, "problem_work", work)
    monkeypatch.setattr(roofline, "floor", lambda work, peaks: (work, peaks))
    monkeypatch.setattr(ceilings, "cached_ceilings", lambda *args: "peaks")
    model = Tiny()
    job = ReferenceJob(problem=ProblemRef("p", "p.py"), device="cuda", seed=0, trials=1, atol=1e-2, rtol=1e-2,
                       backward=True, ceilings_dir=str(tmp_path))
    x, upstream = torch.randn(5, 4), torch.randn(5, 3)
    assert reference_child.hardware_floor(job, backward.Gradients(model, reference=True), [x, upstream]) == (
        "work", "peaks")
    assert seen["model"] is model and len(seen["inputs"]) == 1 and seen["inputs"][0] is x
