"""Forward and backward as one call: what `--backward` judges and times (docs/judge.md, "Backward").

`Gradients` wraps a model so that one call on (inputs..., upstream gradient) runs the forward pass with every
floating input made a leaf that requires grad, then `torch.autograd.grad` of the output against the upstream
gradient, and returns the output with the gradient of each floating input and of each named parameter. The judge
wraps the reference, the candidate wraps ModelNew in the same way, so every step of an evaluation (trials, timed
rounds with their rechecks, determinism, the float64 oracle) sees forward and backward as one call with several
outputs, compared one by one under the run's tolerance. The upstream gradient is drawn with the inputs, from the same
seed, so it is fresh for every trial and every timed round: a backward that caches gradients returns stale ones.

Gradients come from `torch.autograd.grad`, never from `.grad`: nothing accumulates between calls, and nothing of the
previous call's is left for a solution to return.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any, cast

import torch

from kbench.judge.verdict import Verdict, short
from kbench.results.records import Status

_tensor_type = torch.Tensor
_autograd_grad, _zeros_like, _randn = torch.autograd.grad, torch.zeros_like, torch.randn
_enable_grad = torch.enable_grad


class Labeled(tuple[Any, ...]):
    """A call's outputs, with what each is ("output", "the gradient of input 0", ...) for the comparison's
    messages."""

    labels: tuple[str, ...]


def labeled(items: Sequence[Any], labels: Sequence[str]) -> Labeled:
    out = Labeled(items)
    out.labels = tuple(labels)
    return out


def label(outputs: Any, index: int, count: int) -> str:
    """What output `index` of `count` is: its name where the outputs carry names, else "output i"."""
    labels = getattr(outputs, "labels", None)
    if labels is not None and index < len(labels):
        return str(labels[index])
    return f"output {index}" if count > 1 else "output"


def _floating(x: Any) -> bool:
    return isinstance(x, _tensor_type) and x.is_floating_point()


def parameter_names(model: torch.nn.Module) -> tuple[str, ...]:
    """The parameters a backward pass gives gradients for: the model's own that require grad, by name."""
    return tuple(name for name, p in model.named_parameters() if p.requires_grad)


class Gradients(torch.nn.Module):
    """`model`'s forward and backward as one call (see the module's docstring). `names`: the parameters whose
    gradients are returned, in order (default: all of `model`'s that require grad); the candidate is given the
    reference's names, and a ModelNew without one of them cannot carry its gradient (`incorrect`)."""

    def __init__(self, model: torch.nn.Module, names: Sequence[str] | None = None, reference: bool = False,
                 owner: torch.nn.Module | None = None) -> None:
        super().__init__()
        self.model = model
        self.reference = reference  # the reference's failures are the problem's (not_run), never a solution's
        self.owner = owner if owner is not None else model  # whose parameters, by name (torch.compile renames them)
        self.names = parameter_names(self.owner) if names is None else tuple(names)
        own = dict(self.owner.named_parameters())
        for name in self.names:
            if name not in own:
                raise self._failure(f"ModelNew has no parameter {name!r}: the reference's gradient for it has "
                                    "nowhere to come from (--backward compares the gradient of every parameter)")

    # The weights are the wrapped model's, under its own names: the judge hands them to the candidate by name.
    def state_dict(self, *args: Any, **kwargs: Any) -> Any:
        return self.model.state_dict(*args, **kwargs)

    def load_state_dict(self, state_dict: Any, strict: bool = True, assign: bool = False) -> Any:
        return self.model.load_state_dict(state_dict, strict=strict, assign=assign)

    def forward(self, *args: Any) -> Labeled:
        *inputs, upstream = args
        leaves = [x.detach().requires_grad_() if _floating(x) else x for x in inputs]
        own = dict(self.owner.named_parameters())
        params = [own[name] for name in self.names]
        with _enable_grad():
            out = self.model(*leaves)
            if type(out) is not _tensor_type:
                raise self._failure(f"the output is a {type(out).__name__}: --backward needs one tensor")
            if out.grad_fn is None:
                raise self._failure("the output has no gradient path (detached, computed under no_grad or by a "
                                    "kernel without a backward): --backward cannot reach the inputs or parameters")
            wrt_inputs = [(i, x) for i, x in enumerate(leaves) if _floating(x)]
            wrt = [x for _, x in wrt_inputs] + params
            try:
                grads = _autograd_grad(out, wrt, grad_outputs=upstream, allow_unused=True)
            except Exception as exc:
                if "invalid gradient" in str(exc):  # autograd's check of a custom backward's shape or device
                    raise self._failure(f"the backward pass returned {short(exc)}") from exc
                raise
        names = [f"the gradient of input {i}" for i, _ in wrt_inputs] + [f"the gradient of {n}" for n in self.names]
        filled = [g if g is not None else _zeros_like(w) for g, w in zip(grads, wrt)]
        return labeled([out.detach(), *filled], ["output", *names])


    def _failure(self, message: str) -> Verdict:
        if self.reference:
            return Verdict(Status.NOT_RUN, f"the reference cannot be judged with --backward: {message}")
        return Verdict(Status.INCORRECT, message)


def gradient_names(model: Any) -> tuple[str, ...] | None:
    """The parameter names a backward-wrapped model returns gradients for; None for a forward-only model."""
    return model.names if isinstance(model, Gradients) else None


def compiled(model: Any) -> Any:
    """torch.compile of a reference: of the wrapped model inside the wrapper for a backward one, so that AOTAutograd
    compiles its backward too and the autograd call itself stays outside the graph."""
    if isinstance(model, Gradients):
        return Gradients(cast(torch.nn.Module, torch.compile(model.model)), model.names, reference=True,
                         owner=model.model)
    return torch.compile(model)


def with_upstream(make: Callable[[int], list[Any]], model: torch.nn.Module) -> Callable[[int], list[Any]]:
    """make(seed) plus an upstream gradient for the output, drawn after the inputs from the same seed (fresh for
    every trial and round). The output's shape and dtype are learnt from one forward call of `model` now; a model
    whose forward returns anything but one floating tensor cannot be judged with --backward (`not_run`)."""
    with torch.no_grad():
        probe = model(*make(0))
    if type(probe) is not _tensor_type or not probe.is_floating_point():
        kind = type(probe).__name__ if type(probe) is not _tensor_type else f"a {probe.dtype} tensor"
        raise Verdict(Status.NOT_RUN, f"--backward needs a forward that returns one floating tensor; this reference "
                      f"returns {kind}")
    shape, dtype, device = tuple(probe.shape), probe.dtype, probe.device
    del probe

    def draw(seed: int) -> list[Any]:
        inputs = make(seed)  # seeds the generators
        return [*inputs, _randn(shape, dtype=dtype, device=device)]

    return draw
