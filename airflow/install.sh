#!/usr/bin/env bash
# Installs Apache Airflow into .airflow/venv from the pinned airflow/requirements.txt, for oncebox's
# Airflow tests, demo and benchmark. Does nothing when that venv already holds exactly those pins.
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
venv="$root/.airflow/venv"
requirements="$root/airflow/requirements.txt"
stamp="$venv/.oncebox-requirements"
python="${ONCEBOX_PYTHON:-python3}"

if [ -x "$venv/bin/airflow" ] && [ -f "$stamp" ] && cmp -s "$requirements" "$stamp"; then
  echo "airflow: already installed in .airflow/venv"
  exit 0
fi
echo "airflow: installing Apache Airflow from airflow/requirements.txt into .airflow/venv (a minute or two)"
"$python" -m venv "$venv"
# This machine's pip configuration names local indexes that may be missing; its warnings about them are noise.
"$venv/bin/pip" install --quiet --disable-pip-version-check --no-input -r "$requirements" \
  2> >(grep -v 'is ignored: it is neither a file nor a directory' >&2)
"$venv/bin/airflow" version >/dev/null
cp "$requirements" "$stamp"
echo "airflow: installed $("$venv/bin/airflow" version 2>/dev/null | tail -1)"
