"""Compare the SASS of the `tf32_igemm` kernels between two revisions or two solution files, kernel by kernel.

A generator change (fragments split, dead code dropped, a template rewritten) must not change what runs on the GPU.
This script compiles the CUDA source that each solution file hands to `load_inline`, with the flags `load_inline`
would use (torch's nvcc flags, the file's `extra_cuda_cflags`), disassembles it with `cuobjdump -sass -res-usage`
and compares every `__global__` function's instructions (with their encodings) and resource usage (registers, stack,
shared and local memory, parameter bank). Only file names, paths and the hash in anonymous-namespace names are
ignored. No GPU needed: only nvcc (kbench.system.toolkit finds the toolkit) and cuobjdump (the toolkit's, or triton's).

    python tools/tf32_igemm/compare_sass.py HEAD~1 HEAD          # the four shipped files at two revisions
    python tools/tf32_igemm/compare_sass.py main HEAD --arch sm_90 --problem conv3d_gelu
    python tools/tf32_igemm/compare_sass.py main .               # main against the working tree
    python tools/tf32_igemm/compare_sass.py old.py new.py        # two files

A file whose flags name their own target (`-gencode=...`) is built for that target alone, as torch would; the
others for --arch (default sm_90a; `kbench` builds sm_90 on an H100, which --arch sm_90 reproduces). Exit status:
0 if every kernel's SASS is identical, 1 otherwise (or if a kernel is missing on one side), 2 on usage errors.
"""

from __future__ import annotations

import argparse
import ast
import difflib
import hashlib
import os
import re
import shutil
import subprocess
import sys
import sysconfig
import tempfile
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from kbench.system import toolkit  # noqa: E402

PROBLEMS = ("conv3d_gelu", "conv3d_logsumexp", "convtranspose3d_layernorm", "convtranspose3d_softmax")
# load_inline puts these before the cuda_sources (torch.utils.cpp_extension.load_inline, no_implicit_headers=False).
IMPLICIT_HEADERS = "#include <torch/types.h>\n#include <cuda.h>\n#include <cuda_runtime.h>\n"
# torch.utils.cpp_extension.COMMON_NVCC_FLAGS (copied: importing it is slow and warns without a GPU).
DUMP_FORMAT = "sass+res-usage"  # part of the cache key: dumps made otherwise are not reused
TORCH_NVCC_FLAGS = ["-D__CUDA_NO_HALF_OPERATORS__", "-D__CUDA_NO_HALF_CONVERSIONS__",
                    "-D__CUDA_NO_BFLOAT16_CONVERSIONS__", "-D__CUDA_NO_HALF2_OPERATORS__", "--expt-relaxed-constexpr"]


def _literal(tree: ast.Module, node: ast.expr):
    """The value of node: a literal, or a module-level name bound once to one."""
    if isinstance(node, ast.Name):
        for stmt in tree.body:
            if isinstance(stmt, ast.Assign) and any(isinstance(t, ast.Name) and t.id == node.id for t in stmt.targets):
                return ast.literal_eval(stmt.value)
        raise ValueError(f"{node.id} is not assigned at module level")
    return ast.literal_eval(node)


def load_inline_args(text: str) -> tuple[str, str, list[str]]:
    """(name, CUDA source as load_inline writes it, extra_cuda_cflags) of the file's load_inline call."""
    tree = ast.parse(text)
    calls = [n for n in ast.walk(tree) if isinstance(n, ast.Call)
             and getattr(n.func, "id", getattr(n.func, "attr", None)) == "load_inline"]
    if len(calls) != 1:
        raise ValueError(f"expected one load_inline call, found {len(calls)}")
    kw = {k.arg: k.value for k in calls[0].keywords}
    sources = _literal(tree, kw["cuda_sources"])
    sources = [sources] if isinstance(sources, str) else list(sources)
    flags = list(_literal(tree, kw["extra_cuda_cflags"])) if "extra_cuda_cflags" in kw else []
    return _literal(tree, kw["name"]), IMPLICIT_HEADERS + "\n".join(sources), flags


def nvcc_command(name: str, flags: list[str], arch: str, cuda_home: Path, src: Path, out: Path) -> list[str]:
    """torch's nvcc command for one extension source (its ninja file's cuda_cflags), as a cubin for one target."""
    import torch.utils.cpp_extension as ce  # after CUDA_HOME is set: include_paths reads it

    own_target = any(f.startswith(("-gencode", "-arch", "--gpu-architecture")) for f in flags)
    sm = arch.removeprefix("sm_")
    target = [] if own_target else [f"-gencode=arch=compute_{sm},code=sm_{sm}"]
    includes = [*ce.include_paths("cuda"), sysconfig.get_path("include", scheme="posix_prefix")]
    return [str(cuda_home / "bin" / "nvcc"), f"-DTORCH_EXTENSION_NAME={name}", "-DTORCH_API_INCLUDE_EXTENSION_H",
            *[a for inc in includes for a in ("-isystem", inc)], *TORCH_NVCC_FLAGS, *target,
            "--compiler-options", "-fPIC", *flags, "-std=c++20", "-cubin", "-o", str(out), str(src)]


def sass_by_kernel(dump: str) -> dict[str, list[str]]:
    """cuobjdump -sass -res-usage output -> {function: its resource line (registers, stack, shared and local memory,
    parameter bank), then its instruction lines}. Kept: each instruction with its offset and encoding (branch targets
    are offsets within the function). Dropped: headers (arch, file, section) and blank lines."""
    kernels: dict[str, list[str]] = {}
    current = None
    resources: dict[str, str] = {}
    lines = dump.splitlines()
    for i, line in enumerate(lines):
        if m := re.match(r"\s*Function (\S+):$", line):  # -res-usage: the next line holds the figures
            resources[_stable_name(m.group(1))] = lines[i + 1].strip()
            continue
        m = re.match(r"\s*Function : (\S+)", line)
        if m:
            current = kernels.setdefault(_stable_name(m.group(1)), [])
        elif current is not None and re.match(r"\s*/\*[0-9a-f]{4,}\*/", line):
            current.append(_stable_name(line.strip()))
        elif current is not None and re.match(r"\s*/\* 0x[0-9a-f]+ \*/", line):  # second encoding word
            current.append(line.strip())
    return {fn: [resources.get(fn, "no resource line"), *code] for fn, code in kernels.items()}


def _stable_name(text: str) -> str:
    """Anonymous-namespace names carry a hash of the translation unit (_ZN39_GLOBAL__N__<hash>_7_cuda_cu_<hash>...,
    39 the name's length): replaced by _GLOBAL__N_, so that a kernel keeps its name across sources."""
    def strip(m: re.Match) -> str:
        return "_GLOBAL__N_" + m.group(0)[len(m.group(1)) + int(m.group(1)):]
    return re.sub(r"(\d+)_GLOBAL__N__\w+", strip, text)


def find_cuobjdump(cuda_home: Path) -> Path | None:
    """The toolkit's cuobjdump, else one on PATH, else the copy triton ships (pip's CUDA toolkits may lack it)."""
    for candidate in (cuda_home / "bin" / "cuobjdump", shutil.which("cuobjdump")):
        if candidate and Path(candidate).is_file():
            return Path(candidate)
    try:
        import triton
    except ImportError:
        return None
    bundled = Path(triton.__file__).parent / "backends" / "nvidia" / "bin" / "cuobjdump"
    return bundled if bundled.is_file() else None


def sass_of(text: str, arch: str, cuda_home: Path, cache: Path | None) -> dict[str, list[str]]:
    """The SASS of the file's CUDA source by kernel. A build takes a minute (torch's headers), so dumps are cached
    under cache, keyed by the nvcc command's flags and the source's bytes."""
    name, source, flags = load_inline_args(text)
    command = nvcc_command(name, flags, arch, cuda_home, Path("cuda.cu"), Path("cuda.cubin"))
    key = hashlib.sha256("\0".join([DUMP_FORMAT, *command, source]).encode()).hexdigest()[:24]
    cached = cache / f"{key}.sass" if cache else None
    if cached and cached.is_file():
        return sass_by_kernel(cached.read_text())
    with tempfile.TemporaryDirectory(prefix="sass_") as tmp:
        src, cubin = Path(tmp) / "cuda.cu", Path(tmp) / "cuda.cubin"
        src.write_text(source)
        build = subprocess.run(nvcc_command(name, flags, arch, cuda_home, src, cubin), capture_output=True, text=True,
                               cwd=tmp)
        if build.returncode != 0:
            raise RuntimeError(f"nvcc failed for {name}:\n{build.stderr[-4000:]}")
        dump = subprocess.run([str(find_cuobjdump(cuda_home)), "-sass", "-res-usage", str(cubin)], capture_output=True,
                              text=True, check=True).stdout
    if cached:
        cached.parent.mkdir(parents=True, exist_ok=True)
        cached.write_text(dump)
    return sass_by_kernel(dump)


def read_side(spec: str, problem: str) -> str:
    """A file's text; the shipped file of problem in a checkout (a directory: `.` is the working tree) or at git
    revision spec."""
    path = f"solutions/{problem}/tf32_igemm.py"
    if Path(spec).is_file():
        return Path(spec).read_text()
    if Path(spec).is_dir():
        return (Path(spec) / path).read_text()
    return subprocess.run(["git", "-C", str(ROOT), "show", f"{spec}:{path}"], capture_output=True, text=True,
                          check=True).stdout


def compare(label: str, old: dict[str, list[str]], new: dict[str, list[str]], show: int) -> bool:
    same = True
    for fn in sorted(old.keys() | new.keys()):
        if fn not in old or fn not in new:
            print(f"  {label}: {fn} only in the {'new' if fn in new else 'old'} build")
            same = False
        elif old[fn] == new[fn]:
            print(f"  {label}: {fn}: identical ({len(old[fn]) // 2} instructions; {old[fn][0]})")
        else:
            same = False
            print(f"  {label}: {fn}: DIFFERS ({len(old[fn]) // 2} -> {len(new[fn]) // 2} instructions)")
            diff = list(difflib.unified_diff(old[fn], new[fn], "old", "new", lineterm="", n=1))
            print("\n".join("      " + d for d in diff[:show]))
    return same


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("old", help="git revision, or a solution file")
    parser.add_argument("new", help="git revision, or a solution file")
    parser.add_argument("--problem", action="append", choices=PROBLEMS,
                        help="with revisions: only this problem (repeatable; default all four)")
    parser.add_argument("--arch", default="sm_90a", help="target of files that name none (default sm_90a)")
    parser.add_argument("--show", type=int, default=40, help="diff lines shown per differing kernel")
    parser.add_argument("--cache", type=Path, default=toolkit.default_cache_dir().parent / "sass",
                        help="where SASS dumps are kept between runs (default: next to kbench's extension cache)")
    parser.add_argument("--no-cache", action="store_true", help="build every side afresh")
    args = parser.parse_args()
    cuda_home = toolkit.find_cuda_home()
    if cuda_home is None:
        print("no CUDA toolkit found (set CUDA_HOME)", file=sys.stderr)
        return 2
    os.environ["CUDA_HOME"] = str(cuda_home)
    if find_cuobjdump(cuda_home) is None:
        print("no cuobjdump (the toolkit's, on PATH, or triton's)", file=sys.stderr)
        return 2
    cache = None if args.no_cache else args.cache
    files = Path(args.old).is_file() and Path(args.new).is_file()
    problems = [Path(args.new).name] if files else (args.problem or list(PROBLEMS))
    texts = [read_side(side, p) for p in problems for side in (args.old, args.new)]
    unique = list(dict.fromkeys(texts))  # a file unchanged between the sides is built once
    with ThreadPoolExecutor(max_workers=max(1, min(len(unique), os.cpu_count() or 1))) as pool:
        built = dict(zip(unique, pool.map(lambda text: sass_of(text, args.arch, cuda_home, cache), unique)))
    ok = True
    for i, problem in enumerate(problems):
        old, new = built[texts[2 * i]], built[texts[2 * i + 1]]
        if not old:
            print(f"  {problem}: no kernels found")
            ok = False
        ok = compare(problem, old, new, args.show) and ok
    print("SASS identical" if ok else "SASS DIFFERS")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
