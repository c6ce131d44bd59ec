#!/usr/bin/env bash
# The GPU checks, as one script for a lent CUDA machine without a package index (docs/results.md,
# "On one GPU"). The missing packages travel as wheels in .whl/ (ai2-tango, fairscale, datasets
# and their small dependencies); results go to $OUT (default /tmp/catwalk_gpu_session).
#   1. every engine at world size 1 on the GPU (bench/gpu_check.py): bf16, fp16, CPU offload
#   2. `tango run` of the demos as written (device_count 2 on a one-GPU machine: CPU workers)
#      and with device_count 1 on the GPU for the three engines
#   3. the fast test tier, which must hold on a GPU machine too
set -u
OUT=${OUT:-/tmp/catwalk_gpu_session}
source "$(dirname "$0")/gpu_preamble.sh"

echo "== engines at world size 1" >>"$summary"
timeout 240 python3 bench/gpu_check.py >"$OUT/gpu_check.log" 2>&1
echo "rc=$?" >>"$summary"
cat bench/results/gpu_check_cuda.md >>"$summary" 2>/dev/null
cp bench/results/gpu_check_cuda.json "$OUT/" 2>/dev/null

run() {
  local name=$1
  shift
  local start=$SECONDS
  timeout 150 python3 -m tango --log-level info --file-friendly-logging run "$@" \
    -w "/tmp/catwalk_ws_$name" >"$OUT/run.log" 2>&1
  echo "== tango run $name: rc=$? in $((SECONDS - start)) s" >>"$summary"
  grep -E "│ (trained|untrained) |exceeds the|Training on" "$OUT/run.log" >>"$summary"
  { echo "== $name"; tail -25 "$OUT/run.log"; } >>"$OUT/runs.log"
}
run demo experiments/demo.jsonnet
run demo_fsdp experiments/demo_fsdp.jsonnet
run demo_1gpu experiments/demo.jsonnet -o '{"steps.trained.device_count": 1}'
run fairscale_1gpu experiments/demo_fsdp.jsonnet -o '{"steps.trained.device_count": 1}'
run fsdp2_1gpu experiments/demo_fsdp.jsonnet \
  -o '{"steps.trained.device_count": 1, "steps.trained.training_engine.type": "catwalk::torch_fsdp"}'
rm -f "$OUT/run.log"

echo "== fast test tier" >>"$summary"
timeout 180 python3 -m pytest -q -m "not slow and not distributed" -p no:cacheprovider \
  >"$OUT/pytest.log" 2>&1
echo "rc=$?" >>"$summary"
tail -4 "$OUT/pytest.log" >>"$summary"
