# An env server image: comprl-gym installed on the project's offline-built Debian base.
#
#   BASE=$(python -c "from comprl_gym.envs.swebench.images import base_image_tag as t; print(t())")
#   docker build --network host -f docker/serve.Dockerfile --build-arg BASE=$BASE \
#       --build-arg EXTRAS=webshop,serve -t comprl-gym-serve .
#   docker run --rm -p 8000:8000 comprl-gym-serve comprl/WebShop-v0 --host 0.0.0.0 --max-sessions 32
#
# BASE is the SWE-bench sandbox base (debootstrap bookworm + python3 3.11, imported into Docker
# by comprl_gym.envs.swebench.images.ensure_base_image, no image registry needed). The build
# reaches only the Debian mirror and PyPI (--network host). EXTRAS picks the families served:
# add "minihack" for MiniHack and "alfworld" for ALFWorld (both compile native code: g++ and
# cmake are then installed too).
ARG BASE=comprl-gym/swebench-base:latest
FROM ${BASE}
USER root
ARG EXTRAS=webshop,serve
RUN tools=""; case ",${EXTRAS}," in *,minihack,*|*,alfworld,*) tools="g++ cmake make libbz2-dev";; esac \
 && apt-get update -q \
 && DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends \
      python3-venv ca-certificates $tools \
 && rm -rf /var/lib/apt/lists/*
# Behind a TLS-intercepting proxy, put its CA bundle at docker/extra-ca.crt (git-ignored); the
# glob lets the build go on without one.
COPY docker/serve.Dockerfile docker/extra-ca.cr[t] /tmp/ca/
RUN if [ -f /tmp/ca/extra-ca.crt ]; then \
      cp /tmp/ca/extra-ca.crt /usr/local/share/ca-certificates/extra-ca.crt && update-ca-certificates; \
    fi; rm -rf /tmp/ca
COPY pyproject.toml README.md constraints.txt /src/
COPY comprl_gym /src/comprl_gym
RUN python3 -m venv /opt/comprl \
 && PIP_CERT=/etc/ssl/certs/ca-certificates.crt /opt/comprl/bin/pip install -q --no-cache-dir \
      -c /src/constraints.txt "/src[${EXTRAS}]"
# Runs as the unprivileged sandbox user; caches (the WebShop catalog) go to a writable folder.
ENV PATH=/opt/comprl/bin:$PATH HOME=/tmp COMPRL_GYM_CACHE=/tmp/comprl-gym
USER 1000
EXPOSE 8000
HEALTHCHECK --interval=30s --timeout=5s \
  CMD python3 -c "import urllib.request as u; u.urlopen('http://127.0.0.1:8000/health', timeout=4)"
ENTRYPOINT ["comprl-gym", "serve"]
CMD ["comprl/WebShop-v0", "--host", "0.0.0.0", "--port", "8000"]
