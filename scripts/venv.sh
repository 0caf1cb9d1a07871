#!/usr/bin/env bash
# Create or reuse the project's virtual environment (.venv) with hpcdist and its test tools.
# Reinstalls only when setup.cfg changes. Prints the venv path.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
venv=${VENV:-$root/.venv}
python=${PYTHON:-python3}
stamp=$venv/.hpcdist-installed
want=$(cat "$root/setup.cfg" "$root/pyproject.toml" | sha256sum | cut -d' ' -f1)
if [ ! -x "$venv/bin/python" ]; then
  "$python" -m venv "$venv" >&2
fi
if [ ! -f "$stamp" ] || [ "$(cat "$stamp")" != "$want" ]; then
  "$venv/bin/python" -m pip install -q --upgrade pip >&2
  "$venv/bin/python" -m pip install -q -e "$root[mpich,test,bench,demo,tensorboard]" >&2
  echo "$want" >"$stamp"
fi
echo "$venv"
