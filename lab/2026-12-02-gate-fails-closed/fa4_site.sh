#!/usr/bin/env bash
# FlashAttention 4 (the fa4-cute peer) on a GPU host without network: its CUDA 13 DSL library,
# xz-packed and split in two (a carried folder holds at most 64 MiB), and the other wheels.
#   bash fa4_site.sh part DIR      # keep one piece of the archive: /tmp/fa4parts/
#   bash fa4_site.sh install DIR   # the last piece and the wheels: /tmp/site, then print PYTHONPATH
set -euo pipefail
mkdir -p /tmp/fa4parts
case "$1" in
  part) cp "$2"/cu13.part* /tmp/fa4parts/ ;;
  install)
    cp "$2"/cu13.part* /tmp/fa4parts/
    mkdir -p /tmp/site && cat /tmp/fa4parts/cu13.part* | xz -d -T0 | tar -C /tmp/site -xf -
    python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/fa4wheels "$2"/*.whl
    cp -a /tmp/fa4wheels/. /tmp/site/
    echo "/tmp/site:/tmp/site/nvidia_cutlass_dsl/dsl_packages" ;;
  *) echo "usage: fa4_site.sh part|install DIR" >&2; exit 2 ;;
esac
