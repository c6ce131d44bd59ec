# Sourced by the GPU scripts (bench/gpu_session.sh, bench/gpu_scoring.sh) after they set $OUT:
# the packages the lent machine lacks, installed from the wheels carried in .whl/ (it has no
# package index), the environment, and $summary started with the GPU and torch versions.
mkdir -p "$OUT"
if [ -d .whl ]; then
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
    --target /tmp/site .whl/*.whl || exit 1
  export PYTHONPATH=/tmp/site:$PWD
fi
export PYTHONUNBUFFERED=1 TOKENIZERS_PARALLELISM=false
summary="$OUT/summary.txt"
{ nvidia-smi -L; python3 -c "import torch; print('torch', torch.__version__)"; } >"$summary" 2>&1
