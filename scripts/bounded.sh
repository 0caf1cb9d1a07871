# Sourced by the test scripts: `bounded LABEL CMD...` runs CMD under the wall-clock limit
# `$limit` (seconds) and names the step that did not finish, so a hang fails with a message.
bounded() {
  local label=$1; shift
  local rc=0
  timeout --kill-after=10 "$limit" "$@" || rc=$?
  if [ $rc -eq 124 ] || [ $rc -eq 137 ]; then
    echo "FAILED: $label did not finish within ${limit}s (hang?)" >&2
  fi
  return $rc
}
