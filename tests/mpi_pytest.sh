#!/usr/bin/env bash
# Run pytest on one MPI rank: rank 0 prints, the others log to a file shown only if they fail.
# Usage: mpiexec -n N bash tests/mpi_pytest.sh [pytest args]
rank=${PMI_RANK:-${OMPI_COMM_WORLD_RANK:-${SLURM_PROCID:-0}}}
if [ "$rank" = 0 ]; then
  exec python -m pytest --with-mpi -p no:cacheprovider "$@"
fi
log=$(mktemp "${TMPDIR:-/tmp}/hpcdist-pytest-rank$rank.XXXXXX")
python -m pytest --with-mpi -p no:cacheprovider -q "$@" >"$log" 2>&1
rc=$?
if [ $rc -ne 0 ]; then
  echo "---- rank $rank failed (exit $rc) ----"
  cat "$log"
fi
rm -f "$log"
exit $rc
