# flashrepro: the pinned image. Build, run and pin it: docs/docker.md.
#
#   docker build --secret id=ca_bundle,src=/etc/ssl/certs/ca-certificates.crt -t flashrepro .
#   docker run --rm --gpus all flashrepro doctor -- --require-gpu   # first check on a GPU host
#   docker run --rm --gpus all -v "$PWD/results:/results" flashrepro   # reproduce -> results/
#
# No "# syntax=" line on purpose: the builder's built-in Dockerfile frontend (Docker >= 20.10
# with BuildKit) handles RUN --mount, and a frontend image would need a registry.

# The base: Debian bookworm with python3 (plus venv and headers). Pinned by tag only: no
# registry was reachable where this file was written, so no digest could be verified. Resolve
# and pin the digest with
#   docker buildx imagetools inspect python:3.12-slim-bookworm
# and build with --build-arg BASE_IMAGE=python:3.12-slim-bookworm@sha256:<digest>.
# Offline: docker/bookworm-base.sh makes a debootstrap base (Debian's python3 is 3.11).
ARG BASE_IMAGE=python:3.12-slim-bookworm
FROM ${BASE_IMAGE}

SHELL ["/bin/bash", "-o", "pipefail", "-c"]

# gcc and libc headers: Triton builds its small C launcher with the system compiler on first
# use of a GPU (the CUDA user-space libraries come with the torch wheels, the driver from the
# host through the NVIDIA container toolkit). g++ and ninja: torch.utils.cpp_extension builds
# flashrepro's C++ decode launch (FLASHREPRO_NATIVE=1, flashrepro.native) with them.
# DL3008 (pin apt versions) ignored: Debian drops superseded versions from its archive, so
# pinned versions break the build within weeks; the base digest and the hashed lock are the pins.
# hadolint ignore=DL3008
RUN apt-get update \
    && apt-get install -y --no-install-recommends gcc g++ libc6-dev ninja-build \
    && rm -rf /var/lib/apt/lists/*

ENV VIRTUAL_ENV=/opt/venv \
    PATH=/opt/venv/bin:$PATH \
    PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1

# Python dependencies from the hashed lock (torch, triton, the test, plot, fa4 and models extras,
# nox). The host's CA bundle, if given as the BuildKit secret "ca_bundle", is pip's trust store (for
# builds behind a TLS-inspecting proxy); it is never written into a layer.
ARG LOCK=requirements/gpu.lock
COPY ${LOCK} /opt/requirements.lock
RUN --mount=type=secret,id=ca_bundle \
    --mount=type=cache,target=/root/.cache/pip \
    if [ -s /run/secrets/ca_bundle ]; then export PIP_CERT=/run/secrets/ca_bundle; fi \
    && python3 -m venv "$VIRTUAL_ENV" \
    && pip install --require-hashes --only-binary :all: -r /opt/requirements.lock

# The project, editable so that its repository root (golden files, baselines) is /opt/flashrepro.
WORKDIR /opt/flashrepro
COPY . .
RUN pip install --no-deps --no-build-isolation --no-index --no-cache-dir -e . \
    && useradd --create-home --uid 1000 --shell /bin/bash flashrepro \
    && mkdir -p /results /var/cache/flashrepro/triton /var/cache/flashrepro/hypothesis \
       /var/cache/flashrepro/torch_extensions \
    && chown flashrepro:flashrepro /results \
    && chmod 1777 /var/cache/flashrepro/triton /var/cache/flashrepro/hypothesis \
       /var/cache/flashrepro/torch_extensions

# Writable state lives outside the (read-only) source tree, also under `docker run --user`.
ENV TRITON_HOME=/var/cache/flashrepro/triton \
    TRITON_CACHE_DIR=/var/cache/flashrepro/triton/cache \
    HYPOTHESIS_STORAGE_DIRECTORY=/var/cache/flashrepro/hypothesis \
    TORCH_EXTENSIONS_DIR=/var/cache/flashrepro/torch_extensions \
    PYTEST_ADDOPTS="-p no:cacheprovider" \
    FLASHREPRO_RESULTS_DIR=/results \
    NVIDIA_VISIBLE_DEVICES=all \
    NVIDIA_DRIVER_CAPABILITIES=compute,utility

USER 1000:1000

# nox sessions against the image's own environment (no virtualenv inside the container):
# `docker run IMAGE tests sass`, `docker run IMAGE doctor -- --require-gpu`.
ENTRYPOINT ["nox", "--no-venv", "-s"]
CMD ["reproduce"]

# Last, so that a new commit or date does not invalidate the cached layers above. `nox -s docker`
# fills these in; a plain `docker build` leaves them empty (see docs/docker.md).
ARG BASE_IMAGE
ARG VERSION=""
ARG REVISION=""
ARG CREATED=""
ARG SOURCE=""
# The source tree has no .git: results JSON take their git commit from here (flashrepro_harness.env).
ENV FLASHREPRO_GIT_COMMIT=${REVISION}
LABEL org.opencontainers.image.title="flashrepro" \
      org.opencontainers.image.description="FlashAttention forward kernels in Triton and Gluon: timings vs torch and SASS counts, reproduced" \
      org.opencontainers.image.licenses="MIT" \
      org.opencontainers.image.source="${SOURCE}" \
      org.opencontainers.image.revision="${REVISION}" \
      org.opencontainers.image.version="${VERSION}" \
      org.opencontainers.image.created="${CREATED}" \
      org.opencontainers.image.base.name="${BASE_IMAGE}"
