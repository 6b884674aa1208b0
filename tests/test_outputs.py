"""A timed call's outputs where they lie (kbench.judge.candidate.outputs) and the spot check that ends the judge's window."""

import pytest
import torch

from kbench.judge.candidate import protocol
from kbench.judge.candidate.outputs import Locator, OutputViews, check_output
from kbench.judge.timing.timed_call import spot_check, spots
from kbench.judge.verdict import Verdict
from kbench.results.codec import ProtocolError


def _gen(seed=0):
    g = torch.Generator()
    g.manual_seed(seed)
    return g


def _check(outputs, expected, atol, rtol, generator):
    """The spot check as the judge runs it: coordinates and expected values drawn first, the outputs read after."""
    return spot_check(outputs, spots(expected, generator), atol, rtol)


def test_the_spot_check_passes_matching_outputs_and_reads_strided_ones_in_place():
    ref = torch.rand(64, 48)
    assert _check([ref.clone()], ref, 1e-6, 1e-6, _gen())
    assert _check([ref.t().contiguous().t()], ref, 1e-6, 1e-6, _gen())  # another layout, the same values
    assert _check([ref + 1e-3], ref, 1e-2, 1e-2, _gen())
    assert not _check([ref + 1.0], ref, 1e-2, 1e-2, _gen())
    assert not _check([torch.rand(64, 48)], ref, 1e-4, 1e-4, _gen())  # stale values of another call


def test_the_spot_check_finds_an_unfinished_output_and_treats_nan_as_the_comparison_does():
    ref = torch.rand(1000)
    half = ref.clone()
    half[500:] = 0.0  # the second half not yet written
    found = [_check([half], ref, 1e-4, 1e-4, _gen(seed)) for seed in range(20)]
    assert not any(found)  # 256 random reads always land in the unwritten half
    nan = torch.full((8,), float("nan"))
    assert _check([nan.clone()], nan, 1e-4, 1e-4, _gen())
    assert not _check([torch.zeros(8)], nan, 1e-4, 1e-4, _gen())
    assert not _check([nan.clone()], torch.zeros(8), 1e-4, 1e-4, _gen())


def test_the_spot_check_skips_numbers_and_handles_scalars_and_tuples():
    a, b = torch.rand(5), torch.tensor(3.0)
    assert _check([a.clone(), b.clone(), 7], (a, b, 7), 1e-6, 1e-6, _gen())
    assert not _check([a.clone(), torch.tensor(4.0)], (a, b), 1e-6, 1e-6, _gen())
    assert not _check([torch.rand(6)], torch.rand(5), 1e-6, 1e-6, _gen())  # the wrong shape


def test_an_output_copied_by_the_candidate_is_the_judges_own_buffer():
    buf = torch.empty(4)
    out = torch.arange(4.0)
    assert Locator().locate(out, buf) == {"copied": True}  # a CPU output is copied
    assert torch.equal(buf, out)
    assert OutputViews().view({"copied": True}, buf, "output") is buf


@pytest.mark.parametrize("location", [
    "somewhere",
    {"handle": "ab", "offset": 0, "size": 64, "stride": [1]},
    {"handle": "00" * 64, "offset": -1, "size": 64, "stride": [1]},
    {"handle": "00" * 64, "offset": 0, "size": 64, "stride": [1, 1]},
    {"handle": "00" * 64, "offset": 0, "size": True, "stride": [1]},
])
def test_the_judge_refuses_a_location_it_cannot_check(location):
    with pytest.raises(Verdict) as caught:
        OutputViews().view(location, torch.empty(4), "output")
    assert caught.value.status == "runtime_error"


def test_the_judge_refuses_an_output_that_would_reach_past_its_allocation():
    views = OutputViews()
    with pytest.raises(Verdict, match="outside its allocation"):
        views.view({"handle": "00" * 64, "offset": 8, "size": 16, "stride": [1]}, torch.empty(4), "output")
    with pytest.raises(Verdict, match="outside its allocation"):  # a stride that walks past the end
        views.view({"handle": "00" * 64, "offset": 0, "size": 64, "stride": [8]}, torch.empty(4), "output")


def test_only_a_plain_dense_tensor_of_the_references_kind_is_an_output():
    buf = torch.empty(2, 3)
    check_output(torch.rand(2, 3), buf, "output")
    for bad, words in ((torch.rand(3, 2), "shape"), (torch.rand(2, 3).double(), "dtype"),
                       (torch.rand(2, 3).to_sparse(), "layout"), ([1, 2], "not a plain torch.Tensor")):
        with pytest.raises(Verdict, match=words):
            check_output(bad, buf, "output")


def test_a_reply_with_output_locations_that_are_not_plain_json_is_refused():
    good = protocol.decode(b'{"status": "ok", "outputs": [{"copied": true}, null]}')
    assert good.outputs == ({"copied": True}, None)
    with pytest.raises(ProtocolError):
        protocol.decode(b'{"status": "ok", "outputs": {"copied": true}}')


def test_an_allocation_handed_back_and_made_again_at_the_same_address_gets_a_handle_of_its_own(monkeypatch):
    """After a memory draw (or a solution's own torch.cuda.empty_cache) the caching allocator may make an allocation
    again at the address and size of one it handed back: the handle of the old one would have the judge read the old
    allocation, which its mapping keeps alive (12 level-2 rows `incorrect` or unmappable on the H200, 2026-11-28). The
    driver's buffer ID tells them apart."""
    from types import SimpleNamespace

    from kbench.judge.candidate import outputs

    class CudaLike:  # what Locator.locate reads of a CUDA output
        device = SimpleNamespace(type="cuda")
        dtype = torch.float32

        def __init__(self, address):
            self.address = address

        def numel(self):
            return 16

        def data_ptr(self):
            return self.address

        def stride(self):
            return (1,)

    live = {"buffer": 7}
    handed: list[int] = []
    monkeypatch.setattr(outputs.driver, "allocation_range", lambda address: (0x1000, 4096, live["buffer"]))

    def handle(start):
        handed.append(live["buffer"])
        return bytes([live["buffer"]]) * outputs.driver.IPC_HANDLE_BYTES

    monkeypatch.setattr(outputs.driver, "ipc_handle", handle)
    locator = Locator()
    first = locator.locate(CudaLike(0x1010), torch.empty(16))
    again = locator.locate(CudaLike(0x1010), torch.empty(16))
    live["buffer"] = 8  # handed back and made again: the same start and size, another allocation
    remade = locator.locate(CudaLike(0x1010), torch.empty(16))
    assert first == again and handed == [7, 8] and remade["handle"] != first["handle"]
    assert remade["offset"] == first["offset"] == 0x10 and remade["size"] == 4096
