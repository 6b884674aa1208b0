"""The fixtures that shave their own time (tests/fixtures/adversarial/shaves), written out at each shave they are tested at."""

import shutil
from pathlib import Path

from tests.conftest import FIXTURES

SHAVES = FIXTURES / "adversarial" / "shaves"
MECHANISMS = ("shaves_through_gc", "shaves_the_reply", "shaves_the_clock")
FACTORS = {"10": 0.9, "50": 0.5}  # a tenth and a half of each reported time shaved off
DEFAULT = "FACTOR = 0.9"


def write_shaves(folder: Path) -> list[str]:
    """Each mechanism at each shave, and the honest copy beside them, into `folder`; the solutions' names."""
    folder.mkdir(parents=True, exist_ok=True)
    names = []
    for mechanism in MECHANISMS:
        text = (SHAVES / f"{mechanism}.py").read_text()
        assert DEFAULT in text, mechanism
        for share, factor in FACTORS.items():
            (folder / f"{mechanism}_{share}.py").write_text(text.replace(DEFAULT, f"FACTOR = {factor}"))
            names.append(f"{mechanism}_{share}")
    shutil.copy(FIXTURES / "adversarial" / "timed" / "honest_copy.py", folder / "honest_copy.py")
    return names
