#!/usr/bin/env bash
# Installs schemathesis into .schemathesis/venv from the pinned fuzz/requirements.txt, for
# `npm run fuzz:schema`. Does nothing when that venv already holds exactly those pins.
exec bash "$(dirname "$0")/../scripts/pinned-venv.sh" schemathesis .schemathesis/venv fuzz/requirements.txt schemathesis schemathesis --version
