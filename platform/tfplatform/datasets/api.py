from typing import Any

from django.db.models import QuerySet
from drf_spectacular.utils import extend_schema
from rest_framework import generics, status
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from tfplatform.datasets import selectors, services
from tfplatform.datasets.inspection import DatasetRequest
from tfplatform.datasets.models import Dataset
from tfplatform.datasets.serializers import DatasetCreateSerializer, DatasetSerializer


class DatasetListCreateApi(generics.ListAPIView):
    """Sharded datasets you can use: yours, your team's (staff: all), each version its own row.
    Register one, then name it as an experiment's `dataset` (its newest version) or as
    `name@version`; registering the name again adds its next version."""

    serializer_class = DatasetSerializer
    filter_backends: list[Any] = []

    def get_queryset(self) -> QuerySet[Dataset]:
        return selectors.dataset_list(user=self.request.user)

    @extend_schema(request=DatasetCreateSerializer, responses={201: DatasetSerializer})
    def post(self, request: Request) -> Response:
        serializer = DatasetCreateSerializer(data=request.data)
        serializer.is_valid(raise_exception=True)
        data = dict(serializer.validated_data)
        owner_name, team_name = data.pop("owner", ""), data.pop("team", "")
        dataset = services.dataset_register(
            user=request.user,  # type: ignore[arg-type]
            request=DatasetRequest(**data), owner_name=owner_name, team_name=team_name,
        )
        return Response(DatasetSerializer(dataset).data, status=status.HTTP_201_CREATED)


class DatasetDetailApi(APIView):
    @extend_schema(responses=DatasetSerializer)
    def get(self, request: Request, dataset_id: int) -> Response:
        dataset = selectors.dataset_get(user=request.user, dataset_id=dataset_id)
        return Response(DatasetSerializer(dataset).data)

    @extend_schema(request=None, responses={204: None},
                   description="Forgets this version; the files stay where they are, and "
                   "experiments that read it still show its number and fingerprint.")
    def delete(self, request: Request, dataset_id: int) -> Response:
        dataset = selectors.dataset_get(user=request.user, dataset_id=dataset_id)
        services.dataset_delete(user=request.user, dataset=dataset)  # type: ignore[arg-type]
        return Response(status=status.HTTP_204_NO_CONTENT)
