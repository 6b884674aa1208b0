#!/bin/bash
# The GPU checks to run on the device before GPU work is called done, logging under $OUT (or ./device-logs).
#
#   bash bench/device_checks.sh tests     # pytest -m cuda tests/test_gpu.py (about 10 minutes on the H100: too
#                                         # long for one device call; run tests-a and tests-b as two calls)
#   bash bench/device_checks.sh tests-a   # the full-size, attack-class, precision, noise and kernel DSL tests
#   bash bench/device_checks.sh tests-b   # the rest
#   bash bench/device_checks.sh sample    # the KernelBench sample with honest copies, then its table (about 4 minutes)
#   bash bench/device_checks.sh four      # all four shipped problems, every solution (about 4 minutes), then the
#                                         # SASS of every extension it built, in $OUT/sass.tgz (cuobjdump)
#   bash bench/device_checks.sh all       # tests and sample (more than one 10-minute device call: run them apart)
#
# `sample` needs a KernelBench checkout's KernelBench/ folder at .kb/KernelBench (carry .kb): fetch
# github:ScalingIntelligence/KernelBench and `git archive HEAD KernelBench | tar -x -C .kb`.
set -u
OUT=${OUT:-device-logs}
mkdir -p "$OUT"
export PYTHONPATH=.
what=${1:-all}
# kbench needs pydantic (the typed parent<->child protocol): where the device's Python lacks it, install the wheels
# carried in .kb/wheels312 (pip download --python-version 3.12 --only-binary=:all: pydantic -d .kb/wheels312).
if ! python3 -c "import pydantic" 2>/dev/null; then
  python3 -m pip install -q --no-index --find-links .kb/wheels312 --target /tmp/kbench-site pydantic > "$OUT/pip.log" 2>&1 \
    || { echo "pydantic is missing and .kb/wheels312 could not install it" >&2; exit 2; }
  export PYTHONPATH=.:/tmp/kbench-site
fi
nvidia-smi --query-gpu=name,clocks.sm,temperature.gpu --format=csv | tee "$OUT/gpu.txt"
python3 -c "import torch; print('torch', torch.__version__)" | tee -a "$OUT/gpu.txt"
part_a="full_size or attack_classes or bf16 or noise or kernel_dsl"
case "$what" in
  tests|all) select=() ;;
  tests-a) select=(-k "$part_a") ;;
  tests-b) select=(-k "not ($part_a)") ;;
esac
if [ "${what#tests}" != "$what" ] || [ "$what" = all ]; then
  timeout 560 python3 -m pytest -m cuda tests/test_gpu.py "${select[@]}" -q -rA --durations=10 -p no:cacheprovider \
    > "$OUT/gpu_tests$what.log" 2>&1
  tail -25 "$OUT/gpu_tests$what.log"
fi
if [ "$what" = four ]; then
  cache="$OUT/four-cache/extensions"  # Triton's cache and the ceilings go beside it: all removed below
  timeout 520 python3 -m kbench run --results-dir "$OUT/four" --cache-dir "$cache" > "$OUT/four.log" 2>&1
  tail -30 "$OUT/four.log"
  cuobjdump=$(command -v cuobjdump || echo /usr/local/cuda/bin/cuobjdump)
  mkdir -p "$OUT/sass"
  for so in $(find "$cache" -name "*.so"); do
    "$cuobjdump" -sass "$so" > "$OUT/sass/$(basename "$so").sass" 2>&1
  done
  rm -rf "$OUT/four-cache"
  ls "$OUT/sass"
  tar -czf "$OUT/sass.tgz" -C "$OUT" sass && rm -r "$OUT/sass"  # one file: the device returns few files per call
fi
if [ "$what" = sample ] || [ "$what" = all ]; then
  if [ ! -d .kb/KernelBench/level1 ]; then
    echo "no KernelBench at .kb/KernelBench: see the header of this script" >&2
    exit 2
  fi
  python3 bench/kernelbench_sample.py prepare .kb/KernelBench .kb/sample
  timeout 500 python3 -m kbench run --problems-dir .kb/sample/problems --solutions-dir .kb/sample/solutions \
    --no-compile-baseline --results-dir "$OUT/sample" > "$OUT/sample.log" 2>&1
  tail -3 "$OUT/sample.log"
  python3 bench/kernelbench_sample.py table "$OUT"/sample/*/run.json | tee "$OUT/sample_table.md"
fi
