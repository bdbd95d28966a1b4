# The application image: web, scheduler and worker nodes all run from it.
FROM python:3.11-slim

ENV PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    PYTHONPATH=/app/platform:/app \
    DJANGO_DEBUG=false

WORKDIR /app
# bubblewrap: worker nodes sandbox every trial task (PLATFORM_TRIAL_RUNTIME=sandbox, the default).
RUN apt-get update && apt-get install -y --no-install-recommends bubblewrap \
    && rm -rf /var/lib/apt/lists/*
RUN useradd --create-home --uid 1000 platform
COPY requirements.txt .
RUN pip install --no-cache-dir -r requirements.txt
# GPU=1 (the GPU worker's build): TensorFlow with its CUDA libraries, the pinned version's
# [and-cuda] extra; the NVIDIA container toolkit mounts the host's driver. A node checks as it
# starts that its TensorFlow sees every GPU NVML finds, and does not join otherwise.
ARG GPU=0
RUN if [ "$GPU" = 1 ]; then \
      pip install --no-cache-dir "tensorflow[and-cuda]==$(sed -n 's/^tensorflow==//p' requirements.txt)"; \
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
