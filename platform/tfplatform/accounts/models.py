from django.contrib.auth.models import AbstractUser
from django.db import models


class Team(models.Model):
    name = models.CharField(max_length=100, unique=True)
    # The scheduler never lets a team hold more GPUs than this at once; 0 means no GPUs.
    gpu_quota = models.PositiveIntegerField(default=4)
    # The highest priority its members may give an experiment (staff: any); higher ones can
    # preempt everyone else's trials, so they are granted, not taken.
    max_priority = models.IntegerField(default=10)
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["name"]

    def __str__(self) -> str:
        return self.name


class User(AbstractUser):
    team = models.ForeignKey(
        Team, null=True, blank=True, on_delete=models.SET_NULL, related_name="members"
    )
