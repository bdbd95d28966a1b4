from typing import Any

from django.db.models import QuerySet
from rest_framework import generics, serializers

from tfplatform.modelregistry.models import ModelVersion
from tfplatform.modelregistry.selectors import model_version_list


class ModelVersionSerializer(serializers.ModelSerializer):
    model_name = serializers.CharField(source="model.name")
    labels: serializers.SlugRelatedField = serializers.SlugRelatedField(
        slug_field="label", many=True, read_only=True
    )
    public = serializers.BooleanField(source="model.public")

    class Meta:
        model = ModelVersion
        fields = [
            "id",
            "model_name",
            "version",
            "state",
            "labels",
            "public",
            "source_experiment",
            "error",
            "created_at",
        ]


class ModelVersionListApi(generics.ListAPIView):
    serializer_class = ModelVersionSerializer
    filter_backends: list[Any] = []

    def get_queryset(self) -> QuerySet[ModelVersion]:
        return model_version_list(user=self.request.user)
