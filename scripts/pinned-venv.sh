#!/usr/bin/env bash
# Installs a Python tool into a venv of the repository from a pinned requirements file, for the tests
# that run it (airflow/install.sh, fuzz/install.sh). Does nothing when the venv already holds exactly
# those pins.
#
#   pinned-venv.sh NAME VENV REQUIREMENTS WHAT VERSION_COMMAND…
#   (VENV and REQUIREMENTS relative to the repository; VERSION_COMMAND run in the venv's bin, its last
#   output line printed once installed)
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
name="$1" venv_dir="$2" requirements_file="$3" what="$4"
venv="$root/$venv_dir" requirements="$root/$requirements_file"
shift 4
version=("$@")
stamp="$venv/.oncebox-requirements"
python="${ONCEBOX_PYTHON:-python3}"

if [ -x "$venv/bin/${version[0]}" ] && [ -f "$stamp" ] && cmp -s "$requirements" "$stamp"; then
  echo "$name: already installed in $venv_dir"
  exit 0
fi
echo "$name: installing $what from $requirements_file into $venv_dir"
"$python" -m venv "$venv"
# This machine's pip configuration names local indexes that may be missing; its warnings about them are noise.
"$venv/bin/pip" install --quiet --disable-pip-version-check --no-input -r "$requirements" \
  2> >(grep -v 'is ignored: it is neither a file nor a directory' >&2)
"$venv/bin/${version[0]}" "${version[@]:1}" >/dev/null
cp "$requirements" "$stamp"
echo "$name: installed $("$venv/bin/${version[0]}" "${version[@]:1}" 2>/dev/null | tail -1)"
