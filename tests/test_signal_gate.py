"""The gate and the signal page (kbench.judge.timing.gate) with the driver's calls replaced: no GPU needed."""

import ctypes
import time

import pytest
import torch

from kbench.judge.timing import driver, gate

OFFSET = 1 << 40  # fake device addresses sit this far above the host page


@pytest.fixture
def fake_driver(monkeypatch):
    """register_host maps a page at address + OFFSET; a stream's wait is recorded; a stream's write lands at once."""
    calls: dict[str, list] = {"register": [], "wait": [], "write": []}

    def register(address, nbytes):
        calls["register"].append((address, nbytes))
        return address + OFFSET

    def wait(stream, device_address, value):
        calls["wait"].append((stream, device_address - OFFSET, value))

    def write(stream, device_address, value):
        calls["write"].append((stream, device_address - OFFSET, value))
        ctypes.c_uint32.from_address(device_address - OFFSET).value = value

    monkeypatch.setattr(driver, "register_host", register)
    monkeypatch.setattr(driver, "wait_value", wait)
    monkeypatch.setattr(driver, "write_value", write)
    monkeypatch.setattr(driver, "unregister_host", lambda address: None)
    return calls


def test_a_gate_waits_for_a_new_value_each_time_it_closes(fake_driver):
    page = gate.SignalPage.private()
    assert fake_driver["register"] == [(page.address, gate.PAGE)] and page.address % gate.PAGE == 0
    g = gate.Gate(page)
    first, second = g.close(7), g.close(7)
    assert second == first + 1  # an open of an earlier close never opens a later one
    assert fake_driver["wait"] == [(7, page.address, first), (7, page.address, second)]
    g.open(first)
    assert page.read(gate.SignalPage.FLAG) == first
    assert g.close(3, value=99) == 99


def test_a_gate_on_a_page_already_opened_goes_on_from_its_value(fake_driver):
    """The judge's calibration and its timing each count their own gate on one page: the second must not close on a
    value the first already opened (the candidate's call would then run before the round's inputs arrive)."""
    page = gate.SignalPage.private()
    first = gate.Gate(page)
    for _ in range(5):
        first.open(first.close(1))
    later = gate.Gate(page)
    assert later.next_value() == 6


def test_the_done_word_is_written_by_a_stream_and_read_by_the_host(fake_driver):
    page = gate.SignalPage.private()
    page.write_on(5, gate.SignalPage.DONE, 41)
    assert fake_driver["write"] == [(5, page.address + 4 * gate.SignalPage.DONE, 41)]
    assert page.read(gate.SignalPage.DONE) == 41 and page.read(gate.SignalPage.FLAG) == 0


def test_a_page_inside_a_shared_tensor_is_the_same_page_in_every_process(fake_driver):
    shared = gate.shared_page_tensor()
    page = gate.SignalPage.within(shared)
    offset = page.address - shared.data_ptr()
    assert 0 <= offset < gate.PAGE and page.address % gate.PAGE == 0
    page.write(gate.SignalPage.FLAG, 12345)
    assert int(shared[offset:offset + 4].view(torch.int32)[0]) == 12345  # the tensor's own bytes: what a peer maps
    with pytest.raises(ValueError, match="no whole page"):
        gate.aligned_page(gate.PAGE + 8, gate.PAGE)


def test_the_watchdog_opens_a_gate_its_owner_cannot_open(fake_driver):
    """A call that synchronizes while issued behind the gate never returns to open it: the watchdog does."""
    g = gate.Gate(gate.SignalPage.private())
    dog = gate.Watchdog(g, deadline_s=0.05)
    value = g.close(1)
    dog.arm(value)
    deadline = time.monotonic() + 5
    while g.page.read(gate.SignalPage.FLAG) != value and time.monotonic() < deadline:
        time.sleep(0.01)
    assert g.page.read(gate.SignalPage.FLAG) == value and g.forced
    dog.disarm()
    value = g.close(1)
    assert not g.forced
    dog.arm(value)
    g.open(value)  # the owner opens in time
    dog.disarm()
    time.sleep(0.1)
    assert not g.forced
