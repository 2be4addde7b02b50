# opsgate: one image for every process (serve, relay, consume, migrate, reconcile, health, ...).
# The environment is built by deploy/build.sh from uv.lock, the same script
# tests/e2e/deploy/test_build_script.py runs outside a container (no container daemon runs in
# CI here): docs/deploy.md, "The image".
#   docker build -t opsgate .
#   docker run --rm -e OPSGATE_DATABASE_URL=... opsgate migrate
ARG PYTHON_IMAGE=python:3.11-slim-bookworm

# -- build: uv installs exactly uv.lock into /opt/opsgate -------------------------------------
FROM ${PYTHON_IMAGE} AS build
# uv, pinned as the Makefile pins it (UV_VERSION).
ARG UV_VERSION=0.13.9
RUN pip install --no-cache-dir --disable-pip-version-check "uv==${UV_VERSION}"
ENV UV_LINK_MODE=copy UV_PYTHON_DOWNLOADS=never
WORKDIR /src
COPY pyproject.toml uv.lock README.md ./
COPY core ./core
COPY agent ./agent
COPY bot ./bot
COPY migrations ./migrations
COPY docs/runbooks ./docs/runbooks
COPY deploy/build.sh ./deploy/build.sh
RUN UV=uv PYTHON=/usr/local/bin/python3.11 deploy/build.sh /src /opt/opsgate

# -- final: the environment, kubectl, a non-root user; no compilers, no uv, no sources ---------
FROM ${PYTHON_IMAGE}
# kubectl for k8s.rollout steps, pinned from Debian's own package (bookworm's kubernetes-client
# is kubectl 1.20.2: docs/deploy.md, "kubectl in the image", says what that means for newer
# clusters).
ARG KUBERNETES_CLIENT_VERSION=1.20.5+really1.20.2-1.1+deb12u1
RUN apt-get update \
    && apt-get install -y --no-install-recommends \
       "kubernetes-client=${KUBERNETES_CLIENT_VERSION}" \
    && rm -rf /var/lib/apt/lists/* \
    && useradd --system --uid 10001 --gid 0 --home-dir /var/lib/opsgate --create-home opsgate
COPY --from=build /opt/opsgate /opt/opsgate
ENV PATH=/opt/opsgate/bin:$PATH PYTHONDONTWRITEBYTECODE=1 PYTHONUNBUFFERED=1 \
    OPSGATE_LOG_FORMAT=json OPSGATE_HEARTBEAT_DIR=/tmp
USER 10001
WORKDIR /var/lib/opsgate
EXPOSE 8080
# No HEALTHCHECK here: one image runs processes with different health (serve: GET /healthz;
# relay and consume: `opsgate health relay|consume`); compose.yaml and the Kubernetes manifests
# give each its own.
ENTRYPOINT ["opsgate"]
# Bound beyond loopback, serve needs OPSGATE_ALLOWED_HOSTS: the names clients reach it by.
CMD ["serve", "--host", "0.0.0.0", "--port", "8080"]
