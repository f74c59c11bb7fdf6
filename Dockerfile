# One image for every kubemesh component; the command picks it:
#   docker run IMAGE apiserver | kubelet | controller-manager | scheduler | etcd | kubeconfig | health | <any command>
# (see scripts/docker-entrypoint and docs/compose.md).
#
# BASE: any Debian bookworm image with python3 (>= 3.11) and its venv module. Users keep the
# official Python image (its bookworm variant: the etcd below is bookworm's); CI passes a base
# built locally with debootstrap (scripts/docker-setup), because no image registry is reachable there.
# Dependencies (with the `etcd` extra: the apiserver's --storage etcd): from the wheelhouse in .docker-cache/wheels when scripts/docker-setup made one
# (offline, no TLS trust needed inside the build), else from PyPI.
# etcd (the `etcd` service of compose.etcd.yaml), pinned to ETCD_VERSION: the host's binary that
# scripts/docker-setup copies into .docker-cache/etcd when it is that version (offline), else
# Debian's etcd-server package at ETCD_DEB_VERSION from the base's apt sources.
ARG BASE=python:3.12-slim-bookworm

FROM ${BASE} AS build
ARG ETCD_VERSION=3.4.23
ARG ETCD_DEB_VERSION=3.4.23-4+b4
ENV PIP_DISABLE_PIP_VERSION_CHECK=1 PIP_NO_CACHE_DIR=1 PYTHONDONTWRITEBYTECODE=1
RUN python3 -m venv /opt/kubemesh
COPY . /src
RUN set -eu; \
    if ls /src/.docker-cache/wheels/kubemesh-*.whl >/dev/null 2>&1; then \
        /opt/kubemesh/bin/pip install --no-index --find-links /src/.docker-cache/wheels 'kubemesh[etcd]'; \
    else \
        /opt/kubemesh/bin/pip install -c /src/constraints.txt '/src[etcd]'; \
    fi; \
    /opt/kubemesh/bin/python -m compileall -q /opt/kubemesh/lib; \
    install -m 0755 /src/scripts/docker-entrypoint /opt/kubemesh/bin/kubemesh-entrypoint; \
    if [ -x /src/.docker-cache/etcd/etcd ]; then \
        install -m 0755 /src/.docker-cache/etcd/etcd /opt/kubemesh/bin/etcd; \
    else \
        apt-get update -qq; \
        DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "etcd-server=${ETCD_DEB_VERSION}"; \
        install -m 0755 /usr/bin/etcd /opt/kubemesh/bin/etcd; \
    fi; \
    /opt/kubemesh/bin/etcd --version | grep -qx "etcd Version: ${ETCD_VERSION}" \
        || { echo "etcd is not version ${ETCD_VERSION}: $(/opt/kubemesh/bin/etcd --version | head -n1)" >&2; exit 1; }

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
