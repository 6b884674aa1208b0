"""Sealed inputs: the fresh inputs of a timed round reach the candidate only inside its request.

Between requests the candidate's process is frozen, but GPU work it queued is not: a kernel left running could wait
for the next round's inputs to appear in the shared buffers and compute the output before the timed call starts, so
that the timed call only returns it. So the judge writes each round's inputs sealed: every byte XORed with a key
stream drawn from a fresh random seed, and sends the seed with the Sample command. The candidate's harness unseals the
buffers in place (the same XOR) before its timer starts; work on the real values can begin only after the command
has arrived, inside the round trip the judge's own clock measures (and the calibration's rounds unseal too, so
the protocol's cost includes it). XOR is exact for every dtype, so the unsealed values are the judge's, bit for bit.

The key comes from torch's generator on the buffer's device, seeded per tensor, so both processes draw the same
bytes; it is at most 64 MiB and repeats over a larger tensor's chunks, which bounds its memory and its cost.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch

CHUNK_BYTES = 64 << 20
_tensor_type = torch.Tensor


def _bytes(t: torch.Tensor) -> torch.Tensor:
    return t.reshape(-1).view(torch.uint8)


def apply(tensors: Sequence[Any], seed: int, chunk_bytes: int = CHUNK_BYTES) -> None:
    """XOR every byte of each tensor in `tensors` (contiguous; anything else is skipped) with the key stream of
    `seed`, in place. Applied twice with one seed it restores the values. Each tensor's key is at most `chunk_bytes`
    long and repeats over the tensor's chunks: one draw per tensor, whatever its size."""
    for index, t in enumerate(x for x in tensors if isinstance(x, _tensor_type)):
        if not t.is_contiguous() or t.numel() == 0:
            continue
        flat = _bytes(t)
        generator = torch.Generator(device=t.device)
        generator.manual_seed((seed * 1_000_003 + index) % (1 << 63))
        key = torch.randint(0, 256, (min(flat.numel(), chunk_bytes),), dtype=torch.uint8, device=t.device,
                            generator=generator)
        for start in range(0, flat.numel(), key.numel()):
            piece = flat[start:start + key.numel()]
            piece.bitwise_xor_(key[:piece.numel()])
