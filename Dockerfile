# The application image: web, scheduler and worker nodes all run from it.
# BASE: any Debian-family image with Python 3.11.5 or later as its `python3`. The compose test
# builds this file on a root filesystem debootstrap made, since no registry can be pulled from
# there (tests/deploy/compose/).
ARG BASE=python:3.11-slim
FROM ${BASE}

ENV PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    PYTHONPATH=/app/platform:/app \
    DJANGO_DEBUG=false \
    VIRTUAL_ENV=/opt/venv \
    PATH=/opt/venv/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin

WORKDIR /app
# bubblewrap: worker nodes sandbox every trial task (PLATFORM_TRIAL_RUNTIME=sandbox, the default).
RUN command -v bwrap >/dev/null || { apt-get update \
      && apt-get install -y --no-install-recommends bubblewrap \
      && rm -rf /var/lib/apt/lists/*; }
# Named volumes start as a copy of these folders: the platform's user owns them, not root.
RUN useradd --create-home --uid 1000 platform \
    && install -d -o platform -g platform /models /work /homes /datasets \
         /var/lib/tfplatform /var/lib/tfplatform/uploads
# What the platform runs on (requirements-app.txt: requirements.txt's pins without the
# development and test tools) in a virtual environment, installed by uv as `make install` does,
# bytecode compiled ahead (nothing at run time may write it); the cache mount keeps the
# downloads between builds and out of the image.
ARG UV_VERSION=0.13.9
ENV UV_LINK_MODE=copy
# At build only, pip and uv trust the base image's certificate store rather than the bundles
# they carry: a builder behind a TLS-inspecting proxy adds its CA to the base.
ARG PIP_CERT=/etc/ssl/certs/ca-certificates.crt
ARG SSL_CERT_FILE=/etc/ssl/certs/ca-certificates.crt
COPY requirements-app.txt .
RUN python3 -m venv /opt/venv && /opt/venv/bin/pip install --no-cache-dir "uv==${UV_VERSION}"
RUN --mount=type=cache,target=/root/.cache/uv \
    uv pip install --python /opt/venv/bin/python --compile-bytecode -r requirements-app.txt
# GPU=1 (the GPU worker's build): TensorFlow with its CUDA libraries, the pinned version's
# [and-cuda] extra; the NVIDIA container toolkit mounts the host's driver. A node checks as it
# starts that its TensorFlow sees every GPU NVML finds, and does not join otherwise.
ARG GPU=0
RUN --mount=type=cache,target=/root/.cache/uv \
    if [ "$GPU" = 1 ]; then \
      uv pip install --python /opt/venv/bin/python --compile-bytecode \
        "tensorflow[and-cuda]==$(sed -n 's/^tensorflow==//p' requirements-app.txt)"; \
    fi
COPY . .
# The image runs with PYTHONDONTWRITEBYTECODE (and as a user who may not write /app): compiled
# here, or every process and trial task would compile the platform from source as it starts.
RUN python -m compileall -q platform training confinement serving
RUN DJANGO_SECRET_KEY=build-only-collectstatic-key-not-used-at-run-time-0123456789 \
    PLATFORM_VAR_DIR=/var/lib/tfplatform python manage.py collectstatic --noinput \
    && chown -R platform /var/lib/tfplatform

USER platform
EXPOSE 8000
CMD ["gunicorn", "--pythonpath", "platform,.", "--bind", "0.0.0.0:8000", "tfplatform.config.wsgi"]
