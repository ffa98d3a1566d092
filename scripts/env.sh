# Sourced by the scripts: where the pinned Python environment lives (scripts/setup.sh makes it).
# LM_VENV overrides the location; the default is shared by every clone on this machine.
LM_TORCH_PIN=$(sed -n 's/^torch==//p' "$(dirname "${BASH_SOURCE[0]}")/requirements.txt")
LM_VENV=${LM_VENV:-${XDG_CACHE_HOME:-$HOME/.cache}/lmforge/venv-torch-$LM_TORCH_PIN}
LM_PYTHON=${LM_PYTHON:-$LM_VENV/bin/python}
export LM_VENV LM_PYTHON LM_TORCH_PIN
