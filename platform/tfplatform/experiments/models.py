from django.conf import settings
from django.contrib.contenttypes.fields import GenericRelation
from django.db import models

from tfplatform.cluster.elastic import Size


class Environment(models.Model):
    """What trials run in: a base image (run by docker/podman nodes; a sandbox node uses its own
    runtime) plus pinned packages."""

    name = models.CharField(max_length=100, unique=True)
    image = models.CharField(max_length=300)
    tensorflow_version = models.CharField(max_length=20)
    gpu_capable = models.BooleanField(default=False)
    # Normalized `name==version` requirements (training.isolation.venvs validates them).
    extra_packages = models.JSONField(default=list, blank=True)
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["name"]

    def __str__(self) -> str:
        return self.name


class EnvironmentBuild(models.Model):
    """An environment's venv on one node, as that node last built it (`key`: its content hash).

    Environments pinning the same packages share one venv on a node; each keeps its own row, so
    every environment shows its own state.
    """

    class State(models.TextChoices):
        BUILDING = "building"
        READY = "ready"
        FAILED = "failed"

    environment = models.ForeignKey(Environment, on_delete=models.CASCADE, related_name="builds")
    node = models.ForeignKey(
        "cluster.Node", on_delete=models.CASCADE, related_name="environment_builds"
    )
    key = models.CharField(max_length=64)
    state = models.CharField(max_length=20, choices=State.choices, default=State.BUILDING)
    # The end of the build's output (pip's), capped; the full log stays on the node.
    log = models.TextField(blank=True)
    started_at = models.DateTimeField(null=True, blank=True)
    finished_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["environment__name", "node__hostname"]
        constraints = [
            models.UniqueConstraint(
                fields=["environment", "node", "key"], name="environment_build_unique"
            ),
        ]

    def __str__(self) -> str:
        return f"{self.environment} on {self.node} ({self.state})"


class EnvironmentRevision(models.Model):
    """What an environment held at one time, never changed: an edit of its contents adds one.

    Experiments pin the revision current at submission and their trials build it, so a trial's
    `content_hash` names exactly the image, TensorFlow and packages it ran with
    (experiments/environments.py environment_content_hash).
    """

    environment = models.ForeignKey(
        Environment, on_delete=models.CASCADE, related_name="revisions"
    )
    number = models.PositiveIntegerField()
    content_hash = models.CharField(max_length=64)
    image = models.CharField(max_length=300)
    tensorflow_version = models.CharField(max_length=20)
    packages = models.JSONField(default=list)
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["environment_id", "number"]
        constraints = [
            models.UniqueConstraint(
                fields=["environment", "number"], name="environment_revision_unique"
            ),
        ]

    def __str__(self) -> str:
        return f"{self.environment} revision {self.number}"


class Experiment(models.Model):
    class State(models.TextChoices):
        QUEUED = "queued"
        SCHEDULED = "scheduled"
        RUNNING = "running"
        COMPLETED = "completed"
        FAILED = "failed"
        CANCELED = "canceled"

    class Kind(models.TextChoices):
        TRAINING = "training"
        # A workspace's session (Workspace.experiment): JupyterLab on the devices it was given,
        # queued, placed, accounted and stopped like any trial, listed only as a workspace.
        WORKSPACE = "workspace"

    owner = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="experiments"
    )
    kind = models.CharField(max_length=20, choices=Kind.choices, default=Kind.TRAINING)
    # Copied from the owner at submission: quotas and visibility follow the team it ran for.
    team = models.ForeignKey(
        "accounts.Team", null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    name = models.CharField(max_length=200)
    environment = models.ForeignKey(
        Environment, null=True, blank=True, on_delete=models.PROTECT, related_name="experiments"
    )
    model = models.CharField(max_length=300)
    dataset = models.CharField(max_length=300)
    model_file = models.FileField(upload_to="models/%Y/%m/", blank=True)
    dataset_file = models.FileField(upload_to="datasets/%Y/%m/", blank=True)
    # Pinned at submission (docs/user-guide/lineage.md): the environment's revision its trials
    # build, and the registered dataset's version they read (`dataset` is then its name). The
    # version's number and fingerprint stay when the version is deleted.
    environment_revision = models.ForeignKey(
        EnvironmentRevision, null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    dataset_version = models.ForeignKey(
        "datasets.Dataset", null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    dataset_version_number = models.PositiveIntegerField(null=True, blank=True)
    dataset_fingerprint = models.CharField(max_length=64, blank=True)
    # The experiment this one reproduces (experiments/services/reproduction.py).
    reproduced_from = models.ForeignKey(
        "self", null=True, blank=True, on_delete=models.SET_NULL, related_name="reproductions"
    )
    # What its uploaded files take (its owner's storage quota).
    upload_bytes = models.BigIntegerField(default=0)
    hyperparameters = models.JSONField(default=dict)
    workers = models.PositiveIntegerField(default=1)
    gpus_per_worker = models.PositiveIntegerField(default=0)
    parameter_servers = models.PositiveIntegerField(default=0)
    # Elastic: the smallest size it may run at (workers, or GPUs per worker: at most one of
    # them, 0: fixed). `workers` and `gpus_per_worker` are then its largest, which its global
    # batch is defined for (cluster/elastic.py).
    workers_min = models.PositiveIntegerField(default=0)
    gpus_per_worker_min = models.PositiveIntegerField(default=0)
    # CPU slots a worker without GPUs holds on its node: more than one only for a workspace
    # session that asked for them (the experiment API has no such field).
    cpu_slots_per_worker = models.PositiveIntegerField(default=1)
    # A share of one GPU for each worker instead of whole ones (gpus_per_worker is then 0):
    # thousandths of a device, or an amount of its memory (cluster/placement.py shares).
    gpu_milli = models.PositiveIntegerField(default=0)
    gpu_memory_mb = models.PositiveIntegerField(default=0)
    # Only nodes of this pool, and of this GPU type (Node.pool, Node.gpu_type); empty: any.
    pool = models.CharField(max_length=63, blank=True)
    gpu_type = models.CharField(max_length=100, blank=True)
    priority = models.IntegerField(default=0)
    # What judges its epochs (training/target.py): the best epoch and the time to target.
    target_metric = models.CharField(max_length=100, default="val_accuracy")
    target_mode = models.CharField(max_length=3, default="max")
    target_value = models.FloatField(null=True, blank=True)
    max_restarts = models.PositiveIntegerField(default=3)
    state = models.CharField(max_length=20, choices=State.choices, default=State.QUEUED)
    strategy = models.CharField(max_length=60, blank=True)
    strategy_reason = models.CharField(max_length=300, blank=True)
    pending_reason = models.CharField(max_length=300, blank=True)
    error = models.TextField(blank=True)
    results = models.JSONField(default=dict, blank=True)
    # Markdown, as its team wrote it; pages show it rendered and sanitized (core/notes.py).
    note = models.TextField(blank=True)
    # Out of the list unless asked for; nothing else changes (it still counts, still deploys).
    archived = models.BooleanField(default=False)
    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)
    started_at = models.DateTimeField(null=True, blank=True)
    finished_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["-created_at", "-id"]
        indexes = [models.Index(fields=["state", "-priority", "created_at"])]

    def __str__(self) -> str:
        return f"{self.name} (#{self.pk})"

    @property
    def gpus_requested(self) -> int:
        return self.workers * self.gpus_per_worker

    @property
    def gpus_each_label(self) -> str:
        """What each worker holds of GPUs, as pages say it: "2 GPU", "0.5 GPU", "4096 MB GPU"."""
        if self.gpu_milli:
            return f"{self.gpu_milli / 1000:g} GPU"
        if self.gpu_memory_mb:
            return f"{self.gpu_memory_mb} MB GPU"
        return f"{self.gpus_per_worker} GPU"

    @property
    def gpu_shared(self) -> bool:
        """Its workers hold a share of one GPU each (a fraction, or an amount of memory)."""
        return bool(self.gpu_milli or self.gpu_memory_mb)

    @property
    def elastic(self) -> bool:
        return bool(self.workers_min or self.gpus_per_worker_min)


class ExperimentTag(models.Model):
    """One tag of an experiment (core/notes.py says what a tag may be)."""

    experiment = models.ForeignKey(Experiment, on_delete=models.CASCADE, related_name="tags")
    name = models.CharField(max_length=64)

    class Meta:
        ordering = ["name"]
        constraints = [
            models.UniqueConstraint(fields=["experiment", "name"], name="experiment_tag_unique"),
        ]
        indexes = [models.Index(fields=["name"])]

    def __str__(self) -> str:
        return self.name


class Trial(models.Model):
    """One attempt at running an experiment; a restart is a new trial."""

    class State(models.TextChoices):
        PENDING = "pending"
        RUNNING = "running"
        COMPLETED = "completed"
        FAILED = "failed"
        CANCELED = "canceled"

    experiment = models.ForeignKey(Experiment, on_delete=models.CASCADE, related_name="trials")
    restart_count = models.PositiveIntegerField(default=0)
    state = models.CharField(max_length=20, choices=State.choices, default=State.PENDING)
    exit_reason = models.TextField(blank=True)
    exit_code = models.IntegerField(null=True, blank=True)
    retryable = models.BooleanField(default=False)
    # Set when someone (cancel, preemption, a failed gang member) wants the trial stopped;
    # the supervising worker polls it and stops every process of the trial.
    stop_reason = models.CharField(max_length=50, blank=True)
    # Why, in words, where the stop has a cause worth showing (a resize: what it made room for).
    stop_detail = models.CharField(max_length=300, blank=True)
    # The size it runs at: an elastic experiment's trials differ; null: the experiment's.
    workers = models.PositiveIntegerField(null=True, blank=True)
    gpus_per_worker = models.PositiveIntegerField(null=True, blank=True)
    logs = models.TextField(blank=True)
    placement = models.JSONField(default=dict, blank=True)
    # How its tasks were isolated ("sandbox", or "process": none), as its supervisor reported it.
    runtime = models.CharField(max_length=20, blank=True)
    # Started beyond its team's guarantee, on devices other teams left idle: the first to be
    # preempted when a team within its guarantee needs them (accounts.Team.gpu_limit).
    borrowed = models.BooleanField(default=False)
    # The TensorFlow its tasks actually loaded, which the environment only asks for.
    tensorflow_version = models.CharField(max_length=40, blank=True)
    created_at = models.DateTimeField(auto_now_add=True)
    # When its messages last reached the broker; null while none has (the broker was away).
    dispatched_at = models.DateTimeField(null=True, blank=True)
    started_at = models.DateTimeField(null=True, blank=True)
    # When its first training step finished: submit-to-first-step is what users wait through.
    first_step_at = models.DateTimeField(null=True, blank=True)
    finished_at = models.DateTimeField(null=True, blank=True)
    # The devices it holds (cluster.Allocation's generic holder): deleted with it.
    allocations = GenericRelation(
        "cluster.Allocation", content_type_field="holder_type", object_id_field="holder_id",
        related_query_name="trial",
    )

    class Meta:
        ordering = ["experiment_id", "restart_count"]
        constraints = [
            models.UniqueConstraint(
                fields=["experiment", "restart_count"], name="trial_unique_attempt"
            ),
        ]

    def __str__(self) -> str:
        return f"trial {self.restart_count} of experiment {self.experiment_id}"

    @property
    def size(self) -> Size:
        """The size it runs at: its own where elastic, else its experiment's."""
        experiment = self.experiment
        return Size(experiment.workers if self.workers is None else self.workers,
                    experiment.gpus_per_worker if self.gpus_per_worker is None
                    else self.gpus_per_worker)

    @property
    def size_label(self) -> str:
        """Its size as pages say it: "2 × 4 GPU" (workers × GPUs each), "1 × 0 GPU"."""
        return f"{self.size.workers} × {self.size.gpus_per_worker} GPU"


class TrialLineage(models.Model):
    """What a trial ran with, recorded by its node as it starts (services/lineage.py): copies,
    so the record stays whole when the environment, the dataset or the upload changes or goes.
    Its TensorFlow is the trial's own `tensorflow_version`, which its tasks report."""

    trial = models.OneToOneField(
        Trial, on_delete=models.CASCADE, primary_key=True, related_name="lineage"
    )
    environment_name = models.CharField(max_length=100, blank=True)
    environment_revision = models.PositiveIntegerField(null=True, blank=True)
    environment_hash = models.CharField(max_length=64, blank=True)
    image = models.CharField(max_length=300, blank=True)
    tensorflow_requested = models.CharField(max_length=20, blank=True)
    # `name==version` of every package its venv installed (pip's resolution, from the venv's
    # lock) when `packages_resolved`; otherwise the revision's pinned list (no venv: nothing
    # pinned, or a derived container image whose lock stays inside the image).
    packages = models.JSONField(default=list, blank=True)
    packages_resolved = models.BooleanField(default=False)
    # The node's key of the venv or image it ran in (the content hash plus the node's runtime).
    build_key = models.CharField(max_length=200, blank=True)
    module = models.CharField(max_length=300)
    module_sha256 = models.CharField(max_length=64, blank=True)
    dataset = models.CharField(max_length=300)
    dataset_version = models.PositiveIntegerField(null=True, blank=True)
    # Of the files as the trial found them; a registered version's own is the one it was
    # registered with (they differ when the files changed in place since).
    dataset_fingerprint = models.CharField(max_length=64, blank=True)
    seed = models.BigIntegerField(null=True, blank=True)
    nodes = models.JSONField(default=list, blank=True)
    recorded_at = models.DateTimeField(auto_now_add=True)

    def __str__(self) -> str:
        return f"lineage of {self.trial}"


class Metric(models.Model):
    trial = models.ForeignKey(Trial, on_delete=models.CASCADE, related_name="metrics")
    name = models.CharField(max_length=100)
    step = models.PositiveIntegerField(default=0)
    epoch = models.PositiveIntegerField(null=True, blank=True)
    value = models.FloatField()
    recorded_at = models.DateTimeField()

    class Meta:
        ordering = ["recorded_at", "id"]
        indexes = [models.Index(fields=["trial", "name", "step"])]

    def __str__(self) -> str:
        return f"{self.name}={self.value} (step {self.step})"


class Checkpoint(models.Model):
    experiment = models.ForeignKey(Experiment, on_delete=models.CASCADE, related_name="checkpoints")
    trial = models.ForeignKey(Trial, on_delete=models.CASCADE, related_name="checkpoints")
    epoch = models.PositiveIntegerField()
    path = models.CharField(max_length=500)
    metrics = models.JSONField(default=dict, blank=True)
    is_best = models.BooleanField(default=False)
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["experiment_id", "epoch"]

    def __str__(self) -> str:
        return f"checkpoint epoch {self.epoch} of experiment {self.experiment_id}"


