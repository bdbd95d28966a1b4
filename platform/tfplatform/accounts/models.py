from django.contrib.auth.models import AbstractUser
from django.db import models


class Team(models.Model):
    name = models.CharField(max_length=100, unique=True)
    # The scheduler never lets a team hold more GPUs than this at once; 0 means no GPUs.
    gpu_quota = models.PositiveIntegerField(default=4)
    # The same for CPU slots (a worker without GPUs, a parameter server, a CPU workspace).
    cpu_slot_quota = models.PositiveIntegerField(default=64)
    # Fair share: the quotas above are what the team is guaranteed; up to these limits it may
    # borrow devices other teams leave idle, shared among borrowers by weight and reclaimed
    # (preempted, resumed from a checkpoint) when their owners need them. Empty: no borrowing.
    gpu_limit = models.PositiveIntegerField(null=True, blank=True)
    cpu_slot_limit = models.PositiveIntegerField(null=True, blank=True)
    over_quota_weight = models.PositiveIntegerField(default=1)
    # Per-member limits; empty: the platform's (PLATFORM_USER_MAX_QUEUED, _RUNNING, _WORKSPACES).
    user_max_queued = models.PositiveIntegerField(null=True, blank=True)
    user_max_running = models.PositiveIntegerField(null=True, blank=True)
    user_max_workspaces = models.PositiveIntegerField(null=True, blank=True)
    # The highest priority its members may give an experiment (staff: any); higher ones can
    # preempt everyone else's trials, so they are granted, not taken.
    max_priority = models.IntegerField(default=10)
    # A workspace session of one of its members is stopped after this long, idle or not.
    workspace_max_hours = models.PositiveIntegerField(default=24)
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["name"]

    def __str__(self) -> str:
        return self.name


class User(AbstractUser):
    team = models.ForeignKey(
        Team, null=True, blank=True, on_delete=models.SET_NULL, related_name="members"
    )


class ApiToken(models.Model):
    """An API token: only its SHA-256 is kept (the key is shown once, when issued), with an
    expiry; revoking one deletes it. A user holds as many as they have devices and scripts."""

    user = models.ForeignKey(User, on_delete=models.CASCADE, related_name="api_tokens")
    name = models.CharField(max_length=100)
    # The key's first characters, enough to tell one's tokens apart in a list.
    prefix = models.CharField(max_length=12)
    digest = models.CharField(max_length=64, unique=True)
    created_at = models.DateTimeField(auto_now_add=True)
    expires_at = models.DateTimeField()
    last_used_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["-created_at", "-id"]

    def __str__(self) -> str:
        return f"{self.name} ({self.prefix}…)"


class OidcIdentity(models.Model):
    """A user's account at an OpenID provider, by the provider's issuer and its `sub`: a provider
    never gives another person a subject, where an email address may be reused."""

    user = models.ForeignKey(User, on_delete=models.CASCADE, related_name="oidc_identities")
    issuer = models.CharField(max_length=255)
    # OpenID Connect Core 1.0 §2: at most 255 ASCII characters.
    subject = models.CharField(max_length=255)
    created_at = models.DateTimeField(auto_now_add=True)
    last_sign_in_at = models.DateTimeField(null=True, blank=True)
    # When the provider's claims took the user's access away (the platform deactivated them);
    # a later sign-in the claims allow again reactivates only such a user, not one staff
    # deactivated.
    revoked_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["issuer", "subject"], name="oidc_identity_unique"),
        ]
        verbose_name = "OpenID identity"
        verbose_name_plural = "OpenID identities"

    def __str__(self) -> str:
        return f"{self.subject} at {self.issuer}"
