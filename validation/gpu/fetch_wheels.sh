#!/usr/bin/env bash
# On the development machine: download the wheels the GPU machine's image lacks into .whl/ (at
# the repository's root; *.whl is ignored by git), for the image's Python 3.12 on x86-64. Carry
# .whl with the device call; validation/gpu/run.sh installs them before anything runs.
set -euo pipefail
cd "$(dirname "$0")/../.."
mkdir -p .whl
python3 -m pip download --quiet --no-deps --only-binary=:all: --python-version 3.12 \
    --implementation cp --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 \
    --platform any -d .whl 'simpy>=4.0'
ls .whl
