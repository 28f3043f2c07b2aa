# The sealbench registry server (API + dashboard) as a container image: one replica of a
# deployment. See docs/server.md ("In containers") for the recipes: one machine on SQLite, and
# several replicas behind a load balancer on PostgreSQL (Cloud Run + Cloud SQL).
#
# Build context: this file plus wheels/ (sealbench and every wheel of its `server` extra,
# cp311 manylinux x86_64), e.g.
#   python -m pip wheel --wheel-dir ctx/wheels '.[server]' && cp docker/server.Dockerfile ctx/
#   docker build -f ctx/server.Dockerfile --build-arg BASE_IMAGE=sealbench-base:bookworm ctx
# No network is needed at build time (pip installs from wheels/ only). BASE_IMAGE must be a
# Debian-like image with python3.11 and its venv module: python:3.11-slim, or the offline
# sealbench-base:bookworm that `sealbench image build` makes with debootstrap.
#
# The image never migrates on start: run `sealbench-server migrate` once per release (a job),
# then start the replicas with the default command (`serve`), which refuses a database that is
# behind. Settings are SEALBENCH_SERVER_* variables (docs/server.md); secrets (the database
# password inside DATABASE_URL, the log's signing key file) come from the platform's secret
# store, never from the image.

ARG BASE_IMAGE=python:3.11-slim

FROM ${BASE_IMAGE} AS build
ENV PYTHONDONTWRITEBYTECODE=1 \
    PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1 \
    PIP_NO_INDEX=1
COPY wheels/ /wheels/
RUN set -eu; \
    python3 -c 'import sys; assert sys.version_info[:2] == (3, 11), sys.version'; \
    python3 -m venv /opt/sealbench; \
    /opt/sealbench/bin/python -m pip install --find-links /wheels 'sealbench[server]'; \
    /opt/sealbench/bin/python -m pip uninstall --yes pip; \
    mkdir -p /out/opt /out/etc /out/var/lib/sealbench; \
    cp -a /opt/sealbench /out/opt/sealbench; \
    cp /etc/passwd /etc/group /out/etc/; \
    echo 'sealbench:x:10001:10001:sealbench registry:/var/lib/sealbench:/usr/sbin/nologin' >> /out/etc/passwd; \
    echo 'sealbench:x:10001:' >> /out/etc/group; \
    chown 10001:10001 /out/var/lib/sealbench; \
    chmod 0700 /out/var/lib/sealbench; \
    chmod -R go-w /out/opt

FROM ${BASE_IMAGE}
COPY --from=build /out/ /
# SEALBENCH_SERVER_HOST=0.0.0.0: a container is reached through its platform's proxy; in
# production mode set SEALBENCH_SERVER_ISOLATED_NETWORK=true to say that this is so.
ENV PATH=/opt/sealbench/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin \
    PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    LANG=C.UTF-8 \
    HOME=/var/lib/sealbench \
    SEALBENCH_SERVER_DATA_DIR=/var/lib/sealbench \
    SEALBENCH_SERVER_HOST=0.0.0.0 \
    SEALBENCH_SERVER_PORT=8080
LABEL org.opencontainers.image.title="sealbench registry"
USER 10001:10001
WORKDIR /var/lib/sealbench
VOLUME ["/var/lib/sealbench"]
EXPOSE 8080
ENTRYPOINT ["sealbench-server"]
CMD ["serve"]
