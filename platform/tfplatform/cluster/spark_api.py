"""/api/v1/spark-clusters/: every user sees which Spark clusters take experiments (their pool
and size); staff register, change and remove them, and alone see their Spark configuration."""

from typing import Any

from django.db.models import QuerySet
from drf_spectacular.utils import extend_schema
from rest_framework import permissions, serializers
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from tfplatform.cluster.models import SparkCluster
from tfplatform.cluster.spark import (
    spark_cluster_delete,
    spark_cluster_register,
    spark_cluster_update,
)
from tfplatform.core.errors import InvalidInput, NotFound


class SparkClusterSerializer(serializers.ModelSerializer):
    pool = serializers.CharField(read_only=True, help_text="What an experiment asks for to run "
                                                           "there (`resources.pool`).")

    class Meta:
        model = SparkCluster
        fields = ["id", "name", "pool", "master", "conf", "task_slots", "gpus", "python",
                  "created_at", "updated_at"]
        read_only_fields = ["id", "pool", "created_at", "updated_at"]

    def to_representation(self, instance: SparkCluster) -> dict[str, Any]:
        data = super().to_representation(instance)
        request = self.context.get("request")
        if request is None or not request.user.is_staff:
            data.pop("conf")  # it may hold the cluster's secrets
            data.pop("python")
        return data


class SparkClusterWriteSerializer(serializers.Serializer[Any]):
    name = serializers.CharField(max_length=50)
    master = serializers.CharField(max_length=1000)
    conf = serializers.DictField(child=serializers.CharField(max_length=2000, allow_blank=True),
                                 required=False, default=dict)
    task_slots = serializers.IntegerField(min_value=1, max_value=10_000)
    gpus = serializers.IntegerField(min_value=0, max_value=10_000, required=False, default=0)
    python = serializers.CharField(max_length=500, required=False, default="", allow_blank=True)


class _StaffWrites(permissions.BasePermission):
    def has_permission(self, request: Request, view: Any) -> bool:
        return request.method in permissions.SAFE_METHODS or bool(request.user.is_staff)


def _clusters() -> QuerySet[SparkCluster]:
    return SparkCluster.objects.all()


class SparkClusterListApi(APIView):
    permission_classes = [permissions.IsAuthenticated, _StaffWrites]

    @extend_schema(responses=SparkClusterSerializer(many=True))
    def get(self, request: Request) -> Response:
        return Response(SparkClusterSerializer(_clusters(), many=True,
                                               context={"request": request}).data)

    @extend_schema(request=SparkClusterWriteSerializer, responses={201: SparkClusterSerializer})
    def post(self, request: Request) -> Response:
        body = SparkClusterWriteSerializer(data=request.data)
        body.is_valid(raise_exception=True)
        cluster = spark_cluster_register(actor=request.user, **body.validated_data)
        return Response(SparkClusterSerializer(cluster, context={"request": request}).data,
                        status=201)


class SparkClusterDetailApi(APIView):
    permission_classes = [permissions.IsAuthenticated, _StaffWrites]

    def _cluster(self, cluster_id: int) -> SparkCluster:
        cluster = _clusters().filter(pk=cluster_id).first()
        if cluster is None:
            raise NotFound("Spark cluster not found.")
        return cluster

    @extend_schema(responses=SparkClusterSerializer)
    def get(self, request: Request, cluster_id: int) -> Response:
        return Response(SparkClusterSerializer(self._cluster(cluster_id),
                                               context={"request": request}).data)

    @extend_schema(request=SparkClusterWriteSerializer(partial=True),
                   responses=SparkClusterSerializer)
    def patch(self, request: Request, cluster_id: int) -> Response:
        cluster = self._cluster(cluster_id)
        body = SparkClusterWriteSerializer(data=request.data, partial=True)
        body.is_valid(raise_exception=True)
        if "name" in body.validated_data:
            raise InvalidInput("A Spark cluster keeps its name: its pool is named after it.",
                               field="name")
        cluster = spark_cluster_update(actor=request.user, cluster=cluster,
                                       changes=dict(body.validated_data))
        return Response(SparkClusterSerializer(cluster, context={"request": request}).data)

    @extend_schema(responses={204: None})
    def delete(self, request: Request, cluster_id: int) -> Response:
        spark_cluster_delete(actor=request.user, cluster=self._cluster(cluster_id))
        return Response(status=204)
