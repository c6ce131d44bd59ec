#!/usr/bin/env bash
# The scoring bench (bench/scoring.py) on a lent CUDA machine, as one script: catwalk's
# full-sequence path against the shared-context path, same model directories and requests as the
# CPU figures, float32, batch 32; then a profile of the shared path on HellaSwag. Results in $OUT
# (default /tmp/catwalk_gpu_scoring) and bench/results/scoring_cuda.{json,md}.
#
# The machine has no package index and no lm-eval venv: lm-eval's requests travel as data.
# Before the run, on the CPU machine (after `python bench/scoring.py` built its work dir):
#   mkdir -p bench/.scoring_work && cp /tmp/catwalk_scoring_bench/{requests.json,corpus.txt} bench/.scoring_work/
# and carry bench/.scoring_work (ignored by git, 9 MB); the models are rebuilt there from the
# corpus (same seed, same tokenizer training). Missing packages travel as wheels in .whl/, as for
# bench/gpu_session.sh. With LMEVAL_PYTHON naming a python that has lm-eval 0.4.13, lm-eval is
# timed too.
set -u
OUT=${OUT:-/tmp/catwalk_gpu_scoring}
WORK=${WORK:-bench/.scoring_work}
source "$(dirname "$0")/gpu_preamble.sh"
if [ -n "${LMEVAL_PYTHON:-}" ]; then
  lmeval=(--lmeval-python "$LMEVAL_PYTHON")
else
  lmeval=(--no-lmeval)
fi

echo "== scoring bench, cuda" >>"$summary"
timeout 420 python3 bench/scoring.py --device cuda --work-dir "$WORK" "${lmeval[@]}" \
  --limit "${LIMIT:-100}" --repeats 3 --results-name scoring_cuda >"$OUT/scoring.log" 2>&1
echo "rc=$?" >>"$summary"
cat bench/results/scoring_cuda.md >>"$summary" 2>/dev/null
cp bench/results/scoring_cuda.json "$OUT/" 2>/dev/null

echo "== profile, shared path, gpt2-small / hellaswag" >>"$summary"
timeout 120 python3 bench/scoring.py --device cuda --work-dir "$WORK" --no-lmeval --profile \
  --models gpt2-small --tasks hellaswag --limit 100 >"$OUT/profile.txt" 2>&1
echo "rc=$?" >>"$summary"
