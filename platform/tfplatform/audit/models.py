"""The audit log: one append-only row per staff action and per change to tokens, quotas,
environments, model labels and node states (after Zulip's RealmAuditLog).

Rows are written only by `services.audit_record`, in the transaction of the change they
describe, and never changed or deleted through the ORM: `save()` of an existing row, `delete()`
and the default manager's `update()` and `delete()` raise. What the ORM cannot stop (raw SQL, or
`AuditEntry._base_manager`, which Django's own deletion cascade uses to set `actor` to NULL when
a user is deleted) is left to the database's permissions.
"""

from typing import Any, NoReturn

from django.conf import settings
from django.core.serializers.json import DjangoJSONEncoder
from django.db import models


class AuditAction(models.TextChoices):
    """Stable codes: clients filter on them. New codes go at the end of their group; a code is
    never renamed (old rows keep it)."""

    NODE_CORDON = "node.cordon", "Node cordoned"
    NODE_DRAIN = "node.drain", "Node drained"
    NODE_ENABLE = "node.enable", "Node enabled"
    # By the platform itself: lost (silent), back from lost, drained (its last trial ended).
    NODE_STATE_CHANGE = "node.state_change", "Node state changed"
    NODE_CREATE = "node.create", "Node added by hand"
    NODE_CHANGE = "node.change", "Node changed"
    NODE_DELETE = "node.delete", "Node deleted"
    LABEL_PROMOTE = "label.promote", "Label promoted"
    LABEL_ROLLBACK = "label.rollback", "Label rolled back"
    LABEL_REMOVE = "label.remove", "Label removed"
    MODEL_CREATE = "model.create", "Model added by hand"
    MODEL_CHANGE = "model.change", "Model settings changed"
    MODEL_DELETE = "model.delete", "Model deleted"
    MODEL_REGISTER = "model.register", "Model version registered for another owner"
    EXPERIMENT_PREEMPT = "experiment.preempt", "Experiment preempted"
    EXPERIMENT_CANCEL = "experiment.cancel", "Experiment canceled by another user"
    QUOTA_CHANGE = "quota.change", "Team quotas or limits changed"
    TEAM_CREATE = "team.create", "Team created"
    TEAM_CHANGE = "team.change", "Team changed"
    TEAM_DELETE = "team.delete", "Team deleted"
    ENVIRONMENT_CREATE = "environment.create", "Environment created"
    ENVIRONMENT_CHANGE = "environment.change", "Environment changed"
    ENVIRONMENT_DELETE = "environment.delete", "Environment deleted"
    TOKEN_ISSUE = "token.issue", "API token issued"
    TOKEN_REVOKE = "token.revoke", "API token revoked"
    USER_CREATE = "user.create", "User created"
    USER_CHANGE = "user.change", "User changed"
    USER_DEACTIVATE = "user.deactivate", "User deactivated"
    USER_ACTIVATE = "user.activate", "User reactivated"
    USER_DELETE = "user.delete", "User deleted"
    DATASET_REGISTER = "dataset.register", "Dataset registered for another owner or team"
    DATASET_DELETE = "dataset.delete", "Dataset version deleted by another user"
    SUBSCRIPTION_DELETE = "subscription.delete", "Subscription removed by another user"
    SPARK_CLUSTER_CREATE = "spark_cluster.create", "Spark cluster registered"
    SPARK_CLUSTER_CHANGE = "spark_cluster.change", "Spark cluster changed"
    SPARK_CLUSTER_DELETE = "spark_cluster.delete", "Spark cluster removed"


class AuditLogIsAppendOnly(Exception):
    """A programming error: the audit log is never rewritten."""


def _refuse(*_: Any, **__: Any) -> NoReturn:
    raise AuditLogIsAppendOnly("Audit entries are never changed or deleted.")


class AuditEntryQuerySet(models.QuerySet["AuditEntry"]):
    update = _refuse
    delete = _refuse


class AuditEntry(models.Model):
    # Empty: the platform itself (the scheduler, a worker node, a management command).
    actor = models.ForeignKey(settings.AUTH_USER_MODEL, null=True, blank=True,
                              on_delete=models.SET_NULL, related_name="+")
    # Copied: who acted stays known after their account is deleted.
    actor_username = models.CharField(max_length=150, blank=True)
    created_at = models.DateTimeField(auto_now_add=True)
    # An AuditAction's code; no `choices`, so a new code needs no migration.
    action = models.CharField(max_length=64)
    object_type = models.CharField(max_length=100)  # the model's label: "cluster.node"
    object_id = models.CharField(max_length=64)
    object_repr = models.CharField(max_length=200)
    before = models.JSONField(null=True, blank=True, encoder=DjangoJSONEncoder)
    after = models.JSONField(null=True, blank=True, encoder=DjangoJSONEncoder)
    # The request's client, as the throttles and sign-in lockouts see it (core/client.py);
    # empty outside a request.
    client_address = models.GenericIPAddressField(null=True, blank=True)

    objects = AuditEntryQuerySet.as_manager()

    class Meta:
        ordering = ["-created_at", "-id"]
        verbose_name_plural = "audit entries"
        indexes = [
            models.Index(fields=["-created_at", "-id"], name="audit_newest"),
            models.Index(fields=["action", "-created_at"], name="audit_action"),
            models.Index(fields=["actor_username", "-created_at"], name="audit_actor"),
            models.Index(fields=["object_type", "object_id"], name="audit_object"),
        ]

    def __str__(self) -> str:
        who = self.actor_username or "platform"
        return f"{who} {self.action} {self.object_repr}"

    def save(self, *args: Any, **kwargs: Any) -> None:
        if not self._state.adding:
            _refuse()
        super().save(*args, **kwargs)

    def delete(self, *args: Any, **kwargs: Any) -> NoReturn:
        _refuse()
