#!/usr/bin/env bash
# Installs Apache Airflow into .airflow/venv from the pinned airflow/requirements.txt, for oncebox's
# Airflow tests, demo and benchmark. Does nothing when that venv already holds exactly those pins.
exec bash "$(dirname "$0")/../scripts/pinned-venv.sh" airflow .airflow/venv airflow/requirements.txt "Apache Airflow (a minute or two)" airflow version
