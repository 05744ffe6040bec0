#!/usr/bin/env bash
# Make a Debian bookworm base image without any image registry: debootstrap + docker import.
#
#   sudo docker/bookworm-base.sh [TAG]        # default TAG: flashrepro/bookworm-base:local
#   nox -s docker -- --build-arg BASE_IMAGE=flashrepro/bookworm-base:local
#
# The image holds what the Dockerfile expects of BASE_IMAGE: python3 with venv and headers
# (Debian's python3 is 3.11; the default base python:3.12-slim-bookworm has 3.12, see
# docs/docker.md) and ca-certificates. Needs root, debootstrap and a running Docker daemon.
# DEBIAN_MIRROR picks the archive, e.g. a snapshot for a byte-stable base:
#   DEBIAN_MIRROR=http://snapshot.debian.org/archive/debian/20250520T000000Z
set -euo pipefail
tag=${1:-flashrepro/bookworm-base:local}
mirror=${DEBIAN_MIRROR:-http://deb.debian.org/debian}
rootfs=$(mktemp -d)
trap 'rm -rf "$rootfs"' EXIT

debootstrap --variant=minbase --include=python3,python3-venv,python3-dev,ca-certificates \
    bookworm "$rootfs" "$mirror"
rm -rf "$rootfs"/var/lib/apt/lists/* "$rootfs"/var/cache/apt/*.bin \
    "$rootfs"/var/cache/apt/archives/*.deb
tar -C "$rootfs" --numeric-owner -c . \
    | docker import --change 'ENV LANG=C.UTF-8' --change 'CMD ["bash"]' - "$tag"
docker image inspect --format '{{.Id}} {{.Size}}' "$tag"
