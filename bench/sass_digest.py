"""Compare the SASS of two builds kernel by kernel: `python bench/sass_digest.py BEFORE AFTER` with two folders (or
.tgz files from `bench/device_checks.sh four`) of `cuobjdump -sass` listings, one per extension.

Each kernel's instructions and encodings are compared with the file-dependent part of anonymous-namespace names
taken out (tools/tf32_igemm/compare_sass.py's parser, which compiles revisions here; this compares listings made on
the device), so a kernel built from the same source in another folder compares equal. Exit 1 if any kernel
differs or is missing on one side.
"""

from __future__ import annotations

import hashlib
import sys
import tarfile
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tools" / "tf32_igemm"))
from compare_sass import sass_by_kernel  # noqa: E402 - the one parser of cuobjdump listings


def kernels(listing: str) -> dict[str, str]:
    """Kernel name (anonymous namespace normalised) -> digest of its instructions and encodings."""
    return {name: hashlib.sha256("\n".join(body).encode()).hexdigest()[:16]
            for name, body in sass_by_kernel(listing).items()}


def digests(source: Path) -> dict[str, str]:
    if source.suffix == ".tgz":
        folder = Path(tempfile.mkdtemp())
        with tarfile.open(source) as tar:
            tar.extractall(folder, filter="data")
        source = folder
    out: dict[str, str] = {}
    for listing in sorted(source.rglob("*.sass")):
        out.update({f"{listing.stem.removesuffix('.so')}:{k}": v for k, v in kernels(listing.read_text()).items()})
    return out


def main(before: Path, after: Path) -> int:
    a, b = digests(before), digests(after)
    bad = 0
    for name in sorted(a.keys() | b.keys()):
        verdict = "same" if a.get(name) == b.get(name) else ("missing after" if name not in b else
                                                             "new" if name not in a else "DIFFERENT")
        bad += verdict != "same"
        print(f"{verdict:13} {name}")
    print(f"{len(a.keys() & b.keys()) - sum(a[k] != b[k] for k in a.keys() & b.keys())} of {len(a.keys() | b.keys())} "
          "kernels identical")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main(Path(sys.argv[1]), Path(sys.argv[2])))
