#!/usr/bin/env bash
# Create or reuse the project's virtual environment (.venv) with hpcdist and its test tools.
# Reinstalls only when setup.cfg or pyproject.toml change. Prints the venv path.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
# shellcheck source=scripts/ensure_venv.sh
source "$root/scripts/ensure_venv.sh"
venv=${VENV:-$root/.venv}
ensure_venv "$venv" "$(install_key "$root/setup.cfg" "$root/pyproject.toml" --)" \
  -e "$root[mpich,test,bench,demo,tensorboard]"
echo "$venv"
