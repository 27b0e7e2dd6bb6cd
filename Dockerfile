# syntax=docker/dockerfile:1
# schedlock-server: one uvicorn process per container (scale with replicas, not workers). The image also carries the
# client's `schedlock` command, so a job (a Kubernetes CronJob, say) can run under a lock with `schedlock run`.
#
#   docker build -t schedlock .                                   # python:3.12-slim-bookworm
#   docker build --build-arg PYTHON_IMAGE=python:3.13-slim-bookworm -t schedlock .
#   docker run --rm -e SCHEDLOCK_DATABASE_URL=postgresql://… schedlock migrate
#   docker run --rm -p 8000:8000 -e SCHEDLOCK_DATABASE_URL=postgresql://… \
#       -e SCHEDLOCK_TOKENS_FILE=/run/secrets/tokens.json -v "$PWD/tokens.json:/run/secrets/tokens.json:ro" schedlock
#   docker run --rm --entrypoint schedlock -e SCHEDLOCK_URL=http://schedlock:8000 -e SCHEDLOCK_TOKEN=… schedlock \
#       run --name nightly-report --at-most 14m -- python /jobs/report.py
#
# The image also holds the Go `schedlock` binary (integrations/go: the same command as one static file) at
# /opt/schedlock-cli/schedlock, for images without Python: in their Dockerfile,
#   COPY --from=registry.example.internal/platform/schedlock:0.1.0 /opt/schedlock-cli/schedlock /usr/local/bin/schedlock
# or the binary alone, built for the platform asked (docs/cli.md):
#   docker build --target binary --output type=local,dest=bin .             # bin/schedlock
#
# The image writes nothing outside /tmp, so it runs with a read-only root filesystem.

ARG PYTHON_IMAGE=python:3.12-slim-bookworm
ARG GO_IMAGE=golang:1.26-bookworm

FROM ${PYTHON_IMAGE} AS build
ENV PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1 \
    PYTHONDONTWRITEBYTECODE=1
WORKDIR /src
RUN python -m venv /opt/schedlock

# Dependencies first, the server's and the client's, from their pyproject.toml and the lock alone, so editing the
# code does not reinstall them: the versions the suite tested (requirements.lock). pgserver (the embedded Postgres
# for trying schedlock on a laptop) stays out: in a container the database is external.
COPY pyproject.toml requirements.lock ./
COPY client/pyproject.toml ./client/
RUN python -c "import tomllib; deps = [d for f in ('pyproject.toml', 'client/pyproject.toml') for d in tomllib.load(open(f, 'rb'))['project']['dependencies']]; print('\n'.join(d for d in deps if not d.startswith('pgserver')))" > requirements.txt \
 && /opt/schedlock/bin/pip install --no-cache-dir --requirement requirements.txt --constraint requirements.lock

# Then the service and the client, as regular (non-editable) installs, precompiled so a read-only filesystem is fine.
COPY README.md ./
COPY app ./app
COPY client ./client
RUN /opt/schedlock/bin/pip install --no-cache-dir --no-deps . ./client \
 && /opt/schedlock/bin/python -m compileall -q /opt/schedlock/lib


# The Go binary: standard library only, no cgo, so one static file; cross-compiled on the build machine's platform
# for the target's (docker buildx --platform linux/amd64,linux/arm64).
FROM --platform=$BUILDPLATFORM ${GO_IMAGE} AS binary-build
ARG TARGETOS=linux
ARG TARGETARCH=amd64
WORKDIR /src
COPY integrations/go/go.mod integrations/go/go.sum ./
RUN go mod download
COPY integrations/go ./
RUN CGO_ENABLED=0 GOOS=$TARGETOS GOARCH=$TARGETARCH go build -trimpath -ldflags "-s -w" -o /out/schedlock ./cmd/schedlock

FROM scratch AS binary
COPY --from=binary-build /out/schedlock /schedlock
ENTRYPOINT ["/schedlock"]


FROM ${PYTHON_IMAGE}
LABEL org.opencontainers.image.title="schedlock" \
      org.opencontainers.image.description="ShedLock's lock semantics over HTTP, on one Postgres table" \
      org.opencontainers.image.licenses="Apache-2.0"
RUN groupadd --system --gid 10001 schedlock \
 && useradd --system --uid 10001 --gid schedlock --no-create-home --home-dir /nonexistent \
        --shell /usr/sbin/nologin schedlock
COPY --from=build /opt/schedlock /opt/schedlock
COPY --from=binary /schedlock /opt/schedlock-cli/schedlock

# HOME=/tmp: libraries that look for dotfiles find a writable place even under an arbitrary UID.
ENV PATH=/opt/schedlock/bin:$PATH \
    PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    HOME=/tmp \
    SCHEDLOCK_HOST=0.0.0.0 \
    SCHEDLOCK_PORT=8000 \
    SCHEDLOCK_LOG_FORMAT=json
WORKDIR /tmp
USER 10001:10001
EXPOSE 8000

# Slim images have no curl: ask /healthz with the Python that is there. (Kubernetes uses the chart's probes.)
HEALTHCHECK --interval=15s --timeout=3s --start-period=10s --retries=3 \
  CMD ["python", "-c", "import os, urllib.request; urllib.request.urlopen('http://127.0.0.1:%s/healthz' % os.environ.get('SCHEDLOCK_PORT', '8000'), timeout=2)"]

ENTRYPOINT ["schedlock-server"]
CMD ["serve"]
