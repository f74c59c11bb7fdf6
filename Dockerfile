# One image for every kubemesh component; the command picks it:
#   docker run IMAGE apiserver | kubelet | controller-manager | scheduler | kubeconfig | health | <any command>
# (see scripts/docker-entrypoint and docs/compose.md).
#
# BASE: any Debian-like image with python3 (>= 3.11) and its venv module. Users keep the official
# Python image; CI passes a base built locally with debootstrap (scripts/docker-setup), because no
# image registry is reachable there.
# Dependencies: from the wheelhouse in .docker-cache/wheels when scripts/docker-setup made one
# (offline, no TLS trust needed inside the build), else from PyPI.
ARG BASE=python:3.12-slim

FROM ${BASE} AS build
ENV PIP_DISABLE_PIP_VERSION_CHECK=1 PIP_NO_CACHE_DIR=1 PYTHONDONTWRITEBYTECODE=1
RUN python3 -m venv /opt/kubemesh
COPY . /src
RUN set -eu; \
    if ls /src/.docker-cache/wheels/kubemesh-*.whl >/dev/null 2>&1; then \
        /opt/kubemesh/bin/pip install --no-index --find-links /src/.docker-cache/wheels kubemesh; \
    else \
        /opt/kubemesh/bin/pip install -c /src/constraints.txt /src; \
    fi; \
    /opt/kubemesh/bin/python -m compileall -q /opt/kubemesh/lib; \
    install -m 0755 /src/scripts/docker-entrypoint /opt/kubemesh/bin/kubemesh-entrypoint

FROM ${BASE}
LABEL org.opencontainers.image.title="kubemesh" \
      org.opencontainers.image.description="The Kubernetes control plane emulated as an asyncio microservice mesh"
COPY --from=build /opt/kubemesh /opt/kubemesh
ENV PATH=/opt/kubemesh/bin:$PATH \
    PYTHONUNBUFFERED=1 \
    KUBEMESH_STATE=/state \
    KUBEMESH_DATA=/data
WORKDIR /state
STOPSIGNAL SIGTERM
ENTRYPOINT ["kubemesh-entrypoint"]
CMD ["apiserver"]
