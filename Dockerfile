# coloc-agent node image. Runs as a privileged DaemonSet pod with the host's /sys/fs/cgroup mounted
# (see deploy/daemonset.yaml).
FROM python:3.11-slim AS build
WORKDIR /src
COPY pyproject.toml README.md ./
COPY agent ./agent
COPY qos ./qos
COPY cgroups ./cgroups
RUN pip wheel --no-cache-dir --wheel-dir /wheels .

FROM python:3.11-slim
RUN useradd --system --no-create-home coloc \
 && mkdir -p /var/run/coloc-agent /var/lib/coloc-agent
COPY --from=build /wheels /wheels
RUN pip install --no-cache-dir /wheels/*.whl && rm -rf /wheels
COPY examples/standalone.yaml /etc/coloc-agent/standalone.yaml
EXPOSE 9316
ENTRYPOINT ["coloc-agent"]
CMD ["run", "--config", "/etc/coloc-agent/config.yaml"]
