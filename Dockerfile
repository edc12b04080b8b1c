# coloc-agent node image. The DaemonSet (deploy/base/daemonset.yaml) runs it unprivileged, as uid 0 with
# only CAP_KILL added, a read-only root filesystem, and host volumes for cgroups, state and socket.
#
# Base image pinned by digest. This digest was not pulled or verified on the machine that wrote this file
# (no registry access there): the release process must check it, and refresh it whenever the tag moves, with
#   docker buildx imagetools inspect python:3.11-slim-bookworm
# A wrong digest fails the build; it never silently builds on something else.
FROM python:3.11-slim-bookworm@sha256:2e32f7d302adc1c37428355c1e646897c0c53f4fd60b6a551245fb90ee129f91 AS build
WORKDIR /src
RUN python -m venv /opt/coloc-agent
# Locked, hashed dependencies first (cached layer), then the agent itself without resolving anything.
COPY requirements.lock ./
RUN /opt/coloc-agent/bin/pip install --no-cache-dir --require-hashes -r requirements.lock
COPY pyproject.toml README.md LICENSE ./
COPY agent ./agent
COPY qos ./qos
COPY cgroups ./cgroups
RUN /opt/coloc-agent/bin/pip install --no-cache-dir --no-deps .

FROM python:3.11-slim-bookworm@sha256:2e32f7d302adc1c37428355c1e646897c0c53f4fd60b6a551245fb90ee129f91
ARG VERSION=0.1.0
LABEL org.opencontainers.image.title="coloc-agent" \
      org.opencontainers.image.description="Node-side co-location agent for Kubernetes and YARN batch work" \
      org.opencontainers.image.version="${VERSION}" \
      org.opencontainers.image.licenses="Apache-2.0" \
      org.opencontainers.image.base.name="docker.io/library/python:3.11-slim-bookworm"
COPY --from=build /opt/coloc-agent /opt/coloc-agent
# The default config sits where the DaemonSet mounts its ConfigMap, so the image runs as is; the mount
# replaces it. It is the standalone (node-local) config of deploy/base.
COPY deploy/base/config.yaml /etc/coloc-agent/config.yaml
COPY LICENSE /usr/share/doc/coloc-agent/LICENSE
ENV PATH=/opt/coloc-agent/bin:$PATH \
    PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1
# Non-root by default: `status`, `top` and `inspect` need nothing more. `run` writes root-owned cgroup
# files and signals other users' processes, so the DaemonSet sets runAsUser: 0 (with CAP_KILL only);
# Kubernetes cannot give a non-root user effective capabilities.
USER 65532:65532
EXPOSE 19316
ENTRYPOINT ["coloc-agent"]
CMD ["run", "--config", "/etc/coloc-agent/config.yaml"]
