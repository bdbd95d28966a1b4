"""Settings every gunicorn here reads (it loads ./gunicorn.conf.py by default): the Procfile's
web process, the image, compose and bench/ all start it from the repository root."""

import os

# A worker proves it is alive by touching a file in worker_tmp_dir on every loop; on a
# disk-backed /tmp that is a metadata write per request (a few % of the web process's CPU in
# the inference benchmark). gunicorn's own docs recommend /dev/shm for the same reason; it makes
# the file with mkstemp (unique name, mode 0600), so a shared directory is safe.
SHM = "/dev/shm"  # noqa: S108
worker_tmp_dir = SHM if os.path.isdir(SHM) else None
