"""Per-user storage quota: what a user's uploads and published model versions take on disk,
checked before anything more is stored. Staff are not limited (they manage the disks)."""

from django.apps import apps
from django.conf import settings
from django.db.models import Sum

from tfplatform.accounts.models import User
from tfplatform.core.errors import PayloadTooLarge

MIB = 2**20


def storage_used(*, user: User) -> int:
    experiments = apps.get_model("experiments", "Experiment")
    versions = apps.get_model("modelregistry", "ModelVersion")
    uploads = experiments.objects.filter(owner=user).aggregate(n=Sum("upload_bytes"))["n"]
    models = versions.objects.filter(model__owner=user).aggregate(n=Sum("size_bytes"))["n"]
    return int(uploads or 0) + int(models or 0)


def storage_quota_check(*, user: User, adding: int) -> None:
    """Raises when `adding` more bytes would take the user past PLATFORM_USER_STORAGE_QUOTA_MB."""
    quota = settings.PLATFORM["USER_STORAGE_QUOTA_MB"] * MIB
    if user.is_staff or not quota:
        return
    used = storage_used(user=user)
    if used + adding > quota:
        raise PayloadTooLarge(
            f"This would take your storage to {(used + adding) / MIB:.1f} MiB, past your quota "
            f"of {quota / MIB:.0f} MiB ({used / MIB:.1f} MiB used). Undeploy model versions "
            "you no longer need: that removes their files."
        )
