# shellcheck shell=bash
# ensure_venv VENV KEY PIP_ARGS...: create the virtual environment VENV if it is missing, then
# (after upgrading pip) `pip install PIP_ARGS` into it, unless the last install there recorded the
# same KEY: a hash of what decides the install (setup.cfg, pyproject.toml, pinned releases), so a
# venv is reinstalled only when one of those changes. Sets VENV_STAMP (the file holding KEY) and
# VENV_INSTALLED (1 when this call installed). Sourced by the scripts that build a venv.
ensure_venv() {
  local venv=$1 key=$2
  shift 2
  VENV_STAMP=$venv/.installed-key
  VENV_INSTALLED=0
  if [ ! -x "$venv/bin/python" ]; then
    "${PYTHON:-python3}" -m venv "$venv" >&2
  fi
  if [ ! -f "$VENV_STAMP" ] || [ "$(cat "$VENV_STAMP")" != "$key" ]; then
    echo "== installing $* into $venv" >&2
    "$venv/bin/python" -m pip install -q --upgrade pip >&2
    "$venv/bin/python" -m pip install -q "$@" >&2
    echo "$key" >"$VENV_STAMP"
    VENV_INSTALLED=1
  fi
}

# install_key FILE... -- WORD...: the KEY of ensure_venv for these files' contents and words.
install_key() {
  local files=()
  while [ $# -gt 0 ] && [ "$1" != -- ]; do
    files+=("$1")
    shift
  done
  [ $# -gt 0 ] && shift
  (cat "${files[@]}"; echo "$*") | sha256sum | cut -d' ' -f1
}
