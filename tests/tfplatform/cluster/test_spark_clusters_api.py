"""/api/v1/spark-clusters/: staff register, change and remove Spark clusters (each change in
the audit log); users see where they may run, never a cluster's configuration."""

from typing import Any

import pytest
from rest_framework.test import APIClient

from tests.factories import UserFactory
from tfplatform.audit.models import AuditEntry
from tfplatform.cluster.models import SparkCluster

pytestmark = pytest.mark.django_db

CLUSTER = {"name": "dev", "master": "local[2]", "task_slots": 2,
           "conf": {"spark.driver.memory": "512m"}}


def test_staff_register_a_cluster_and_others_cannot() -> None:
    staff, user = APIClient(), APIClient()
    staff.force_authenticate(UserFactory(is_staff=True))
    user.force_authenticate(UserFactory())
    refused = user.post("/api/v1/spark-clusters/", {**CLUSTER, "name": "mine"}, format="json")
    assert refused.status_code == 403 and refused.json()["code"]
    made = staff.post("/api/v1/spark-clusters/", {**CLUSTER, "name": "prod"}, format="json")
    assert made.status_code == 201, made.content
    assert made.json()["pool"] == "spark-prod"
    assert AuditEntry.objects.filter(action="spark_cluster.create").count() == 1
    # Users see where they may run, not the cluster's configuration (it may hold secrets).
    seen = user.get("/api/v1/spark-clusters/").json()
    assert [c["pool"] for c in seen] == ["spark-prod"] and "conf" not in seen[0]
    cluster_id = made.json()["id"]
    assert user.patch(f"/api/v1/spark-clusters/{cluster_id}/", {"task_slots": 9},
                      format="json").status_code == 403
    assert user.delete(f"/api/v1/spark-clusters/{cluster_id}/").status_code == 403
    for bad in ({"master": "http://evil"}, {"conf": {"spark.master": "local"}},
                {"conf": {"not.spark": "x"}}, {"task_slots": 0}, {"name": "Bad Name"}):
        answer = staff.post("/api/v1/spark-clusters/", {**CLUSTER, "name": "x", **bad},
                            format="json")
        assert answer.status_code == 400, (bad, answer.content)
    assert staff.post("/api/v1/spark-clusters/", {**CLUSTER, "name": "prod"},
                      format="json").status_code == 409
    assert staff.patch(f"/api/v1/spark-clusters/{cluster_id}/", {"task_slots": 4},
                       format="json").json()["task_slots"] == 4
    assert staff.delete(f"/api/v1/spark-clusters/{cluster_id}/").status_code == 204
    assert not SparkCluster.objects.exists()
    assert list(AuditEntry.objects.values_list("action", flat=True).order_by("id")) == [
        "spark_cluster.create", "spark_cluster.change", "spark_cluster.delete"]




def test_a_local_master_is_refused_unless_the_platform_allows_it_for_development(
    platform_settings_override: Any,
) -> None:
    staff = APIClient()
    staff.force_authenticate(UserFactory(is_staff=True))
    platform_settings_override(spark_local_masters=False)
    for master in ("local[2]", "local-cluster[1,2,1024]"):
        refused = staff.post("/api/v1/spark-clusters/", {**CLUSTER, "master": master},
                             format="json")
        assert refused.status_code == 400 and "isolation" in str(refused.json()), refused.json()
    assert staff.post("/api/v1/spark-clusters/", {**CLUSTER, "master": "spark://head:7077"},
                      format="json").status_code == 201
