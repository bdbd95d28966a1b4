"""Environment revisions: an environment edited in place keeps each of its contents, hashed.

The content hash covers what a trial runs with: the image, the TensorFlow version asked for and
the pinned packages, as JSON with sorted keys. Its name and `gpu_capable` are labels, not
contents. Migration 0018 hashed the environments it found the same way.
"""

import hashlib
import json
from collections.abc import Sequence

from django.db import transaction

from tfplatform.experiments.models import Environment, EnvironmentRevision


def environment_content_hash(*, image: str, tensorflow_version: str,
                             packages: Sequence[str]) -> str:
    content = json.dumps({"image": image, "packages": sorted(packages),
                          "tensorflow_version": tensorflow_version},
                         sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(content.encode()).hexdigest()


def environment_revision_ensure(*, environment: Environment) -> EnvironmentRevision:
    """The revision of the environment's contents as stored now: its newest, or a new one when
    they changed since (an edit, or rows made before revisions or around the services)."""
    with transaction.atomic():
        # Locked: submissions racing an edit agree on one revision per contents.
        current = Environment.objects.select_for_update().get(pk=environment.pk)
        packages = sorted(current.extra_packages)
        content_hash = environment_content_hash(
            image=current.image, tensorflow_version=current.tensorflow_version,
            packages=packages)
        newest = current.revisions.order_by("-number").first()
        if newest is not None and newest.content_hash == content_hash:
            return newest
        return EnvironmentRevision.objects.create(
            environment=current, number=newest.number + 1 if newest is not None else 1,
            content_hash=content_hash, image=current.image,
            tensorflow_version=current.tensorflow_version, packages=packages)
