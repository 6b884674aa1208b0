"""A gate on a CUDA stream: work queued behind it waits until the host opens it.

The gate is a 32-bit word in a page of page-locked host memory that the GPU reads (`SignalPage`, through the
driver module). `Gate.close(stream, value)` enqueues a wait until the word reaches `value`; opening it is one
store of that value, from the host (in this process, or in any other that maps the same page: the judge opens its
candidate's gate) or from a stream of any process that maps it. Everything issued behind a closed gate is queued
before the GPU starts on it, so the events around a call time its GPU work alone, not the host's time to issue it
(nvbench's blocking kernel does the same with a spinning kernel). The page's second word is the one a stream writes
when its work is done (`SignalPage.DONE`): the judge watches it without asking the candidate's process anything.

A call that waits for the GPU while it is being issued (a synchronize, `.item()`) would wait for ever behind a gate
only its own host can open, so an in-process gate is opened by a `Watchdog` after a deadline; such a sample is not
a GPU-time sample (`Gate.forced`). A judge opens its candidate's gate itself when the candidate is late to say that
it has issued its call.

Every user needs a CUDA context current on its thread (torch's: make one first).
"""

from __future__ import annotations

import ctypes
import mmap
import threading
from typing import Any

from kbench.judge.timing import driver

PAGE = mmap.PAGESIZE
WORD_BYTES = 4


class SignalPage:
    """One page of host memory, page-locked and mapped for the GPU, holding 32-bit words: FLAG (a gate) and DONE (what a
    stream writes when its work is over). `owner` keeps the memory alive."""

    FLAG = 0
    DONE = 16  # a cache line away from FLAG

    def __init__(self, address: int, owner: object) -> None:
        if address % PAGE:
            raise ValueError(f"a signal page must start a page (address {address:#x})")
        self.address = address
        self._owner = owner
        self.device_address = driver.register_host(address, PAGE)

    @classmethod
    def private(cls) -> SignalPage:
        """A page of this process alone (anonymous memory)."""
        page = mmap.mmap(-1, PAGE)
        return cls(ctypes.addressof(ctypes.c_char.from_buffer(page)), page)

    @classmethod
    def within(cls, shared: Any) -> SignalPage:
        """The first whole page inside a CPU tensor in shared memory (at least two pages long): the same page in every
        process the tensor is shared with, since the mapping starts a page there too."""
        return cls(aligned_page(shared.data_ptr(), shared.numel() * shared.element_size()), shared)

    def _word(self, index: int) -> ctypes.c_uint32:
        return ctypes.c_uint32.from_address(self.address + index * WORD_BYTES)

    def read(self, index: int) -> int:
        return int(self._word(index).value)

    def write(self, index: int, value: int) -> None:
        self._word(index).value = value & 0xFFFFFFFF

    def device_word(self, index: int) -> int:
        return self.device_address + index * WORD_BYTES

    def write_on(self, stream: int, index: int, value: int) -> None:
        """Enqueue on `stream` a write of `value` to word `index`, after the stream's earlier work and its memory
        writes."""
        driver.write_value(stream, self.device_word(index), value)

    def release(self) -> None:
        try:
            driver.unregister_host(self.address)
        except driver.DriverError:
            pass


def aligned_page(address: int, nbytes: int) -> int:
    """The first page-aligned address inside [address, address + nbytes) with a whole page after it."""
    start = -(-address // PAGE) * PAGE
    if start + PAGE > address + nbytes:
        raise ValueError(f"{nbytes} bytes at {address:#x} hold no whole page")
    return start


def shared_page_tensor() -> Any:
    """A CPU tensor in shared memory that holds a whole page wherever it is mapped (for `SignalPage.within`)."""
    import torch  # heavy: the rest of gate.py needs no torch

    return torch.zeros(3 * PAGE, dtype=torch.uint8).share_memory_()


class Gate:
    """The FLAG word of a signal page as a gate: `close` on a stream, `open` from the host. Its values go on from the
    page's current one, whoever made the page: a gate closed on a value the page has already passed would be open."""

    def __init__(self, page: SignalPage) -> None:
        self.page = page
        self._value = page.read(SignalPage.FLAG)
        self.forced = False  # the last gate was opened by a deadline, not by its owner

    def next_value(self) -> int:
        self._value = (self._value + 1) & 0xFFFFFFFF or 1
        return self._value

    def close(self, stream: int, value: int | None = None) -> int:
        """Enqueue on `stream` a wait for `value` (default: the next one); returns it (what `open` writes)."""
        value = self.next_value() if value is None else value
        driver.wait_value(stream, self.page.device_word(SignalPage.FLAG), value)
        self.forced = False
        return value

    def open(self, value: int) -> None:
        self.page.write(SignalPage.FLAG, value)


class Watchdog:
    """Opens a gate whose owner is stuck: a thread that, while armed, opens the gate after `deadline_s`.

    Arm before issuing work behind a closed gate, disarm after opening it. A call that synchronizes while it is being
    issued waits for the gate, so the owner never gets to open it: the watchdog does, marks the gate `forced`, and the
    call goes on (late, and its sample is no GPU-time sample)."""

    def __init__(self, gate: Gate, deadline_s: float) -> None:
        self.gate = gate
        self.deadline_s = deadline_s
        self._armed = threading.Event()
        self._done = threading.Event()
        self._value = 0
        self._thread = threading.Thread(target=self._run, name="kbench-gate-watchdog", daemon=True)
        self._thread.start()

    def arm(self, value: int) -> None:
        self._value = value
        self._done.clear()
        self._armed.set()

    def disarm(self) -> None:
        self._armed.clear()
        self._done.set()

    def _run(self) -> None:
        while True:
            self._armed.wait()
            if not self._done.wait(self.deadline_s) and self._armed.is_set():
                self.gate.forced = True
                self.gate.open(self._value)
                self._done.wait()
