"""Workspaces: JupyterLab sessions on scheduled devices (each session an experiment)."""

from django.conf import settings
from django.db import models

from tfplatform.experiments.models import Environment, Experiment


class Workspace(models.Model):
    """JupyterLab on scheduled devices: each start is a session, an Experiment of kind
    "workspace" (its trial holds the Allocations); the owner's home volume outlives them all."""

    owner = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="workspaces"
    )
    team = models.ForeignKey(
        "accounts.Team", null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    name = models.CharField(max_length=200)
    environment = models.ForeignKey(
        Environment, null=True, blank=True, on_delete=models.PROTECT, related_name="workspaces"
    )
    gpus = models.PositiveIntegerField(default=0)
    # CPU slots on one node when gpus is 0 (a workspace with GPUs holds no CPU slot).
    cpu_slots = models.PositiveIntegerField(default=1)
    # A share of one GPU instead of whole ones (gpus is then 0), as an experiment's worker.
    gpu_milli = models.PositiveIntegerField(default=0)
    gpu_memory_mb = models.PositiveIntegerField(default=0)
    # Its sessions run only on nodes of this pool and GPU type; empty: any.
    pool = models.CharField(max_length=63, blank=True)
    gpu_type = models.CharField(max_length=100, blank=True)
    priority = models.IntegerField(default=0)
    # The current (or last) session; a restart makes a new one.
    experiment = models.ForeignKey(
        Experiment, null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    # The API token the running session was given (its owner's, revoked when it stops).
    api_token = models.ForeignKey(
        "accounts.ApiToken", null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    # Jupyter's last kernel or terminal activity, as the session's node last read it.
    last_activity_at = models.DateTimeField(null=True, blank=True)
    # When the session's Jupyter first answered its node: "running" means it can be opened.
    ready_at = models.DateTimeField(null=True, blank=True)
    stop_reason = models.CharField(max_length=200, blank=True)
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        # The table the experiments app made: the model moved, its rows did not.
        db_table = "experiments_workspace"
        ordering = ["-created_at", "-id"]

    def __str__(self) -> str:
        return f"workspace {self.name} (#{self.pk})"
