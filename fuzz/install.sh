#!/usr/bin/env bash
# Installs schemathesis into .schemathesis/venv from the pinned fuzz/requirements.txt, for
# `npm run fuzz:schema`. Does nothing when that venv already holds exactly those pins.
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
venv="$root/.schemathesis/venv"
requirements="$root/fuzz/requirements.txt"
stamp="$venv/.oncebox-requirements"
python="${ONCEBOX_PYTHON:-python3}"

if [ -x "$venv/bin/schemathesis" ] && [ -f "$stamp" ] && cmp -s "$requirements" "$stamp"; then
  echo "schemathesis: already installed in .schemathesis/venv"
  exit 0
fi
echo "schemathesis: installing from fuzz/requirements.txt into .schemathesis/venv"
"$python" -m venv "$venv"
# This machine's pip configuration names local indexes that may be missing; its warnings about them are noise.
"$venv/bin/pip" install --quiet --disable-pip-version-check --no-input -r "$requirements" \
  2> >(grep -v 'is ignored: it is neither a file nor a directory' >&2)
"$venv/bin/schemathesis" --version >/dev/null
cp "$requirements" "$stamp"
echo "schemathesis: installed $("$venv/bin/schemathesis" --version)"
