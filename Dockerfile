# opsgate: one image for every process (serve, relay, consume, migrate, reconcile, ...).
# Documentation for users (docs/deploy.md); not built in CI here.
#   docker build -t opsgate .
#   docker run --rm -e OPSGATE_DATABASE_URL=... opsgate migrate
FROM python:3.11-slim AS build
ENV PIP_NO_CACHE_DIR=1 PIP_DISABLE_PIP_VERSION_CHECK=1
WORKDIR /src
COPY pyproject.toml README.md ./
COPY core ./core
COPY agent ./agent
COPY bot ./bot
COPY migrations ./migrations
RUN pip wheel --wheel-dir /wheels .

FROM python:3.11-slim
ENV PYTHONDONTWRITEBYTECODE=1 PYTHONUNBUFFERED=1 \
    OPSGATE_LOG_FORMAT=json
COPY --from=build /wheels /wheels
RUN pip install --no-cache-dir /wheels/*.whl && rm -rf /wheels \
    && useradd --system --uid 10001 --home-dir /var/lib/opsgate --create-home opsgate
USER opsgate
WORKDIR /var/lib/opsgate
EXPOSE 8080
# Liveness: the process answers. Readiness (/readyz) belongs to the orchestrator's probe.
HEALTHCHECK --interval=30s --timeout=3s --retries=3 \
    CMD python -c "import urllib.request; urllib.request.urlopen('http://127.0.0.1:8080/healthz', timeout=2)" || exit 1
ENTRYPOINT ["opsgate"]
# Bound beyond loopback, serve needs OPSGATE_ALLOWED_HOSTS: the names clients reach it by.
CMD ["serve", "--host", "0.0.0.0", "--port", "8080"]
