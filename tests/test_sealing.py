"""Sealed inputs (kbench.judge.sealing): a timed round's inputs are readable only after the candidate's request arrives."""

import pytest
import torch

from kbench.judge import judge, judge_timing, sealing
from tests.test_judge import _job, _reference


@pytest.mark.parametrize("make", [lambda: torch.rand(3, 5), lambda: torch.randint(-9, 9, (4, 7)),
                                  lambda: torch.rand(6) > 0.5, lambda: torch.tensor(2.5), lambda: torch.rand(0),
                                  lambda: torch.rand(4, 4, dtype=torch.float64).to(torch.bfloat16)])
def test_sealing_changes_the_bytes_and_the_same_seed_restores_them_exactly(make):
    original = make()
    t = original.clone()
    sealing.apply([t], 12345)
    if t.numel():
        assert not torch.equal(t.view(torch.uint8) if t.dim() else t.reshape(1).view(torch.uint8),
                               original.view(torch.uint8) if original.dim() else original.reshape(1).view(torch.uint8))
    sealing.apply([t], 12345)
    assert torch.equal(t.reshape(-1).view(torch.uint8), original.reshape(-1).view(torch.uint8))


def test_the_key_depends_on_the_seed_and_the_chunks_cover_every_byte():
    a, b = torch.zeros(1000), torch.zeros(1000)
    sealing.apply([a], 1, chunk_bytes=256)  # 16 chunks of a 4000-byte tensor (the last one short)
    sealing.apply([b], 2, chunk_bytes=256)
    assert not torch.equal(a, b)
    assert (a.view(torch.uint8) != 0).float().mean() > 0.9  # every chunk was keyed (about 1/256 of bytes stay 0)
    assert (a.view(torch.uint8)[-100:] != 0).float().mean() > 0.9
    sealing.apply([a], 1, chunk_bytes=256)
    assert torch.equal(a, torch.zeros(1000))


def test_a_timed_rounds_inputs_sit_sealed_in_the_shared_buffers_until_the_sample_unseals_them():
    problem, reference, init, make = _reference()
    cand = judge.CandidateProcess()
    session = judge.Session(cand, "cpu")
    try:
        judge_timing.calibrate(_job(), session, reference, init, make, make(1),
                               reference(*make(1)))
        values = make(7)
        session.refill(values, sealed=True)
        assert session.seal != 0
        assert not torch.equal(session.inputs[0], values[0])  # what a process reading the buffers now would see
        session.sample()
        assert session.seal == 0
        assert torch.equal(session.inputs[0], values[0])  # unsealed by the candidate, bit for bit
        assert torch.allclose(session.outputs()[0], reference(*values), atol=1e-6)
        session.refill(make(8))  # a plain refill (trials, profile) leaves no seal behind
        assert session.seal == 0 and torch.equal(session.inputs[0], make(8)[0])
    finally:
        cand.kill()
