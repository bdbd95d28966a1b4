from django.conf import settings
from django.db import models


class Search(models.Model):
    """Many experiments of one model over a search space; a searcher picks their
    hyperparameters and (adaptive) which of them train on. Each trial is an ordinary
    experiment, scheduled, preempted and resumed like any other."""

    class State(models.TextChoices):
        RUNNING = "running"
        COMPLETED = "completed"
        CANCELED = "canceled"

    class Searcher(models.TextChoices):
        GRID = "grid"
        RANDOM = "random"
        ADAPTIVE = "adaptive"

    owner = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="searches"
    )
    team = models.ForeignKey(
        "accounts.Team", null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    name = models.CharField(max_length=200)
    searcher = models.CharField(max_length=20, choices=Searcher.choices)
    # {name: {"values": [...]} | {"type", "low", "high", "log"?, "step"?}} (searchers.py)
    space = models.JSONField()
    metric = models.CharField(max_length=100, default="val_accuracy")
    mode = models.CharField(max_length=3, default="max")
    max_trials = models.PositiveIntegerField()
    max_concurrent = models.PositiveIntegerField()
    # Every trial's epochs (grid, random) or the last rung's (adaptive).
    max_epochs = models.PositiveIntegerField()
    grace_period = models.PositiveIntegerField(default=1)
    reduction_factor = models.PositiveIntegerField(default=3)
    seed = models.PositiveIntegerField(default=0)
    # What every trial shares; its hyperparameters are the base the space's values override.
    model = models.CharField(max_length=300)
    dataset = models.CharField(max_length=300)
    environment = models.ForeignKey(
        "experiments.Environment", null=True, blank=True, on_delete=models.PROTECT,
        related_name="+",
    )
    hyperparameters = models.JSONField(default=dict, blank=True)
    workers = models.PositiveIntegerField(default=1)
    gpus_per_worker = models.PositiveIntegerField(default=0)
    parameter_servers = models.PositiveIntegerField(default=0)
    # What each trial's experiment asks for beyond its size (Experiment's fields of the names).
    gpu_milli = models.PositiveIntegerField(default=0)
    gpu_memory_mb = models.PositiveIntegerField(default=0)
    pool = models.CharField(max_length=63, blank=True)
    gpu_type = models.CharField(max_length=100, blank=True)
    priority = models.IntegerField(default=0)
    max_restarts = models.PositiveIntegerField(default=3)
    state = models.CharField(max_length=20, choices=State.choices, default=State.RUNNING)
    end_reason = models.CharField(max_length=300, blank=True)
    # Markdown, rendered and sanitized on pages (core/notes.py); archived: out of the list.
    note = models.TextField(blank=True)
    archived = models.BooleanField(default=False)
    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)
    finished_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["-created_at", "-id"]

    def __str__(self) -> str:
        return f"{self.name} (search #{self.pk})"


class SearchTag(models.Model):
    search = models.ForeignKey(Search, on_delete=models.CASCADE, related_name="tags")
    name = models.CharField(max_length=64)

    class Meta:
        ordering = ["name"]
        constraints = [
            models.UniqueConstraint(fields=["search", "name"], name="search_tag_unique"),
        ]
        indexes = [models.Index(fields=["name"])]

    def __str__(self) -> str:
        return self.name


class SearchTrial(models.Model):
    """One configuration of a search, trained by its own experiment."""

    class Outcome(models.TextChoices):
        ACTIVE = ""  # its experiment is queued or training (again, when promoted)
        STOPPED = "stopped"  # not promoted at a rung
        FINISHED = "finished"  # trained to max_epochs
        FAILED = "failed"
        CANCELED = "canceled"

    search = models.ForeignKey(Search, on_delete=models.CASCADE, related_name="trials")
    index = models.PositiveIntegerField()
    experiment = models.OneToOneField(
        "experiments.Experiment", on_delete=models.CASCADE, related_name="search_trial"
    )
    params = models.JSONField()
    # The rung its experiment trains toward now (adaptive; 0 for grid and random).
    rung = models.PositiveIntegerField(default=0)
    # {rung: the metric at the rung's last epoch}, for every rung it completed.
    rung_values = models.JSONField(default=dict, blank=True)
    outcome = models.CharField(max_length=20, choices=Outcome.choices, blank=True)
    best_value = models.FloatField(null=True, blank=True)
    best_epoch = models.PositiveIntegerField(null=True, blank=True)
    epochs_trained = models.PositiveIntegerField(default=0)
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["search_id", "index"]
        constraints = [
            models.UniqueConstraint(fields=["search", "index"], name="search_trial_unique_index"),
        ]

    def __str__(self) -> str:
        return f"trial {self.index} of search {self.search_id}"
