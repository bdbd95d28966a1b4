from django.contrib.contenttypes.fields import GenericForeignKey
from django.contrib.contenttypes.models import ContentType
from django.db import models
from django.db.models import Q
from django.utils import timezone

from tfplatform.cluster.placement import WHOLE_MILLI

# What holds devices: a trial of the experiments app, which sits above this one and is named
# here by its natural key, never imported.
TRIAL_HOLDER = ("experiments", "trial")


def trial_holder_type() -> ContentType:
    # From ContentType's cache, which long-lived processes empty before each task and each
    # scheduler pass (config/celery.py): a flushed or restored database renumbers the types.
    return ContentType.objects.get_by_natural_key(*TRIAL_HOLDER)


class Node(models.Model):
    class State(models.TextChoices):
        READY = "ready"
        CORDONED = "cordoned"
        DRAINING = "draining"
        LOST = "lost"

    class TrialRuntime(models.TextChoices):
        SANDBOX = "sandbox"
        DOCKER = "docker"
        PODMAN = "podman"
        # No isolation: user code runs as the worker's user, with its files and network.
        PROCESS = "process"
        # The node stands for a Spark cluster (SparkCluster): its trials are Spark applications,
        # isolated by the cluster's own containers, not by this platform.
        SPARK = "spark"

    hostname = models.CharField(max_length=200, unique=True)
    # The Celery queue this node's worker consumes; trials for the node are sent there.
    queue = models.CharField(max_length=200, unique=True)
    # Where the node's TF tasks are reached by peers of a multi-node gang (host name or IP).
    address = models.CharField(max_length=200, default="127.0.0.1")
    state = models.CharField(max_length=20, choices=State.choices, default=State.READY)
    cpu_count = models.PositiveIntegerField(default=1)
    memory_bytes = models.BigIntegerField(default=0)
    os_info = models.CharField(max_length=300, blank=True)
    last_heartbeat = models.DateTimeField(null=True, blank=True)
    # How this node runs trials (PLATFORM_TRIAL_RUNTIME), as its worker last registered it.
    trial_runtime = models.CharField(
        max_length=20, choices=TrialRuntime.choices, default=TrialRuntime.SANDBOX
    )
    # Free bytes on the disk(s) under its work and run folders, as its last heartbeat measured
    # them; below PLATFORM_WORK_DISK_MIN_FREE_MB the node gets no new trials (disk pressure).
    work_disk_free_bytes = models.BigIntegerField(null=True, blank=True)
    # Where experiments that ask may run (PLATFORM_NODE_POOL, _LABELS, PLATFORM_GPU_TYPE or
    # NVML's name), as the node's worker last registered them.
    pool = models.CharField(max_length=63, default="default", db_index=True)
    labels = models.JSONField(default=dict, blank=True)
    gpu_type = models.CharField(max_length=100, blank=True)
    registered_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["pool", "hostname"]

    def __str__(self) -> str:
        return self.hostname

    @property
    def isolated(self) -> bool:
        return self.trial_runtime not in (Node.TrialRuntime.PROCESS, Node.TrialRuntime.SPARK)


class SparkCluster(models.Model):
    """A Spark cluster that trials may run on, registered by staff. Its node (`spark_node`
    command: `spark-<name>` in pool `spark-<name>`) offers `task_slots` CPU slots and `gpus`
    GPUs, what the cluster gives the platform; each trial there is one Spark application."""

    name = models.CharField(max_length=50, unique=True)
    # local[N] (development), local-cluster[...], spark://HOST:PORT, yarn or k8s://...
    master = models.CharField(max_length=1000)
    # spark.* settings for every trial's application (they may hold secrets: staff see them).
    conf = models.JSONField(default=dict, blank=True)
    task_slots = models.PositiveIntegerField(default=2)
    gpus = models.PositiveIntegerField(default=0)
    # The executors' Python for the trial process; empty: the executors' own.
    python = models.CharField(max_length=500, blank=True)
    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        ordering = ["name"]

    def __str__(self) -> str:
        return f"Spark cluster {self.name}"

    @property
    def pool(self) -> str:
        return f"spark-{self.name}"


class Device(models.Model):
    class Kind(models.TextChoices):
        CPU = "cpu"
        GPU = "gpu"

    node = models.ForeignKey(Node, on_delete=models.CASCADE, related_name="devices")
    kind = models.CharField(max_length=10, choices=Kind.choices)
    index = models.PositiveIntegerField()
    name = models.CharField(max_length=200)
    memory_bytes = models.BigIntegerField(default=0)
    compute_capability = models.CharField(max_length=20, blank=True)
    # A declared slot stands in for a GPU on machines without one (logical CPU device).
    emulated = models.BooleanField(default=False)
    # A GPU's UUID as NVML (and DCGM's exporter) reports it; a stable made-up one for an
    # emulated slot; empty for CPU slots.
    uuid = models.CharField(max_length=100, blank=True, db_index=True)

    class Meta:
        ordering = ["node__hostname", "kind", "index"]
        constraints = [
            models.UniqueConstraint(fields=["node", "kind", "index"], name="device_unique_slot"),
        ]

    def __str__(self) -> str:
        return f"{self.node.hostname}/{self.kind}:{self.index}"


class AllocationQuerySet(models.QuerySet["Allocation"]):
    def of_trials(self) -> "AllocationQuerySet":
        return self.filter(holder_type=trial_holder_type())

    def of_trial(self, *, trial_id: int) -> "AllocationQuerySet":
        return self.filter(holder_type=trial_holder_type(), holder_id=trial_id)


class Allocation(models.Model):
    """One device held by one trial; released_at is set when the trial lets go of it."""

    # The holder, a trial: a generic reference, so that this app's schema does not depend on
    # the experiments app above it. Trial.allocations (a GenericRelation, query name `trial`)
    # deletes a trial's allocations with it, as the foreign key's CASCADE did, and lets queries
    # still say `trial__experiment`.
    holder_type = models.ForeignKey(ContentType, on_delete=models.PROTECT, related_name="+")
    holder_id = models.PositiveBigIntegerField()
    holder = GenericForeignKey("holder_type", "holder_id")
    node = models.ForeignKey(Node, on_delete=models.CASCADE, related_name="allocations")
    device = models.ForeignKey(
        Device, null=True, blank=True, on_delete=models.CASCADE, related_name="allocations"
    )
    # Which task of the TF cluster this allocation serves (worker 0, ps 1, chief 0, ...).
    task_type = models.CharField(max_length=20, default="worker")
    task_index = models.PositiveIntegerField(default=0)
    # Thousandths of the device it holds: 1000 whole; less, a share of a GPU that holders of
    # shares pack onto (never with a whole holder; placement.py), counted so in quotas and
    # showback.
    share_milli = models.PositiveIntegerField(default=WHOLE_MILLI)
    # Set when the node's worker takes up its part of the trial; guards against redelivery.
    started_at = models.DateTimeField(null=True, blank=True)
    created_at = models.DateTimeField(auto_now_add=True)
    released_at = models.DateTimeField(null=True, blank=True)

    objects = AllocationQuerySet.as_manager()

    class Meta:
        ordering = ["created_at", "id"]
        indexes = [models.Index(fields=["holder_type", "holder_id"], name="allocation_holder")]
        constraints = [
            # The database itself refuses to hand one device whole to two live allocations
            # (shares are packed by the scheduler, which one lock serializes).
            models.UniqueConstraint(
                fields=["device"],
                condition=Q(released_at__isnull=True, device__isnull=False,
                            share_milli=WHOLE_MILLI),
                name="allocation_one_whole_holder_per_device",
            ),
        ]

    def __str__(self) -> str:
        holder = ContentType.objects.get_for_id(self.holder_type_id).model
        return f"{self.device or self.node} → {holder} {self.holder_id}"


class UtilizationSample(models.Model):
    """Cluster-wide capacity and load at one moment; the console charts a series of these."""

    # Not auto_now_add: pruning and backfills need to set the time explicitly.
    recorded_at = models.DateTimeField(default=timezone.now, db_index=True)
    gpus_total = models.PositiveIntegerField(default=0)
    gpus_used = models.PositiveIntegerField(default=0)
    cpu_slots_total = models.PositiveIntegerField(default=0)
    cpu_slots_used = models.PositiveIntegerField(default=0)
    queued = models.PositiveIntegerField(default=0)
    running = models.PositiveIntegerField(default=0)

    class Meta:
        ordering = ["recorded_at", "id"]

    def __str__(self) -> str:
        return f"{self.recorded_at:%Y-%m-%d %H:%M:%S}: {self.gpus_used}/{self.gpus_total} GPUs"


class AllocationUtilization(models.Model):
    """What NVML measured of one allocation's GPU, folded in beat by beat: one bounded row per
    allocation (showback and the idle flag read it); emulated devices never have one."""

    allocation = models.OneToOneField(
        Allocation, on_delete=models.CASCADE, primary_key=True, related_name="utilization"
    )
    samples = models.PositiveIntegerField(default=0)
    # Sum of the samples' GPU utilization in percent: the mean is percent_sum / samples.
    percent_sum = models.FloatField(default=0.0)
    last_percent = models.FloatField(default=0.0)
    first_at = models.DateTimeField()
    last_at = models.DateTimeField()
    # The last sample above the idle threshold; None while every sample has been ~0.
    busy_at = models.DateTimeField(null=True, blank=True)

    def __str__(self) -> str:
        return f"allocation {self.allocation_id}: {self.mean_percent:.0f}% over {self.samples}"

    @property
    def mean_percent(self) -> float:
        return self.percent_sum / self.samples if self.samples else 0.0
