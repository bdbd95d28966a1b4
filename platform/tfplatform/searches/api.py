import io
from typing import Any

from django.db.models import QuerySet
from django.http import HttpResponse
from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import OpenApiResponse, extend_schema
from rest_framework import generics, status
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from tfplatform.core.csv_export import csv_write_rows
from tfplatform.modelregistry.api import ModelVersionSerializer
from tfplatform.searches import selectors, services
from tfplatform.searches.models import Search
from tfplatform.searches.serializers import (
    SearchAnnotateSerializer,
    SearchCreateSerializer,
    SearchDeploySerializer,
    SearchDetailSerializer,
    SearchListQuerySerializer,
    SearchSerializer,
)


def search_detail_data(*, search: Search) -> dict[str, Any]:
    context = {
        "trials": list(selectors.search_trials(search=search)),
        "values": selectors.search_trial_values(search=search),
        "best": selectors.search_best_trial(search=search),
    }
    return SearchDetailSerializer(search, context=context).data


class SearchListCreateApi(generics.ListAPIView):
    """Hyperparameter searches you can see: yours, your team's (staff: all). Each trial is an
    experiment of its own (`trials[].experiment`), scheduled like any other."""

    serializer_class = SearchSerializer
    filter_backends: list[Any] = []

    @extend_schema(parameters=[SearchListQuerySerializer])
    def get(self, request: Request, *args: Any, **kwargs: Any) -> Response:
        return super().get(request, *args, **kwargs)

    def get_queryset(self) -> QuerySet[Search]:
        query = SearchListQuerySerializer(data=self.request.query_params)
        query.is_valid(raise_exception=True)
        return selectors.search_find(user=self.request.user, query=query.query()).select_related(
            "environment")

    @extend_schema(request=SearchCreateSerializer, responses={201: SearchDetailSerializer})
    def post(self, request: Request) -> Response:
        serializer = SearchCreateSerializer(data=request.data)
        serializer.is_valid(raise_exception=True)
        data: dict[str, Any] = dict(serializer.validated_data)
        resources = data.pop("resources", {})
        search = services.search_create(
            owner=request.user,  # type: ignore[arg-type]
            request=services.SearchRequest(**data, **resources),
        )
        return Response(search_detail_data(search=search), status=status.HTTP_201_CREATED)


class SearchDetailApi(APIView):
    @extend_schema(responses=SearchDetailSerializer)
    def get(self, request: Request, search_id: int) -> Response:
        search = selectors.search_get(user=request.user, search_id=search_id)
        return Response(search_detail_data(search=search))

    @extend_schema(request=SearchAnnotateSerializer, responses=SearchDetailSerializer,
                   description="Its tags, note and archived flag: whoever can see it may "
                               "change them.")
    def patch(self, request: Request, search_id: int) -> Response:
        serializer = SearchAnnotateSerializer(data=request.data)
        serializer.is_valid(raise_exception=True)
        search = selectors.search_get(user=request.user, search_id=search_id)
        search = services.search_annotate(search=search, **serializer.validated_data)
        return Response(search_detail_data(search=search))


class SearchCancelApi(APIView):
    @extend_schema(request=None, responses={202: SearchDetailSerializer})
    def post(self, request: Request, search_id: int) -> Response:
        """Ends the search and cancels its queued and training trials."""
        search = selectors.search_get(user=request.user, search_id=search_id)
        search = services.search_cancel(user=request.user, search=search)  # type: ignore[arg-type]
        return Response(search_detail_data(search=search), status=status.HTTP_202_ACCEPTED)


class SearchDeployBestApi(APIView):
    @extend_schema(request=SearchDeploySerializer, responses={202: ModelVersionSerializer})
    def post(self, request: Request, search_id: int) -> Response:
        """Publishes the best completed trial's model as a new version of `model_name`."""
        search = selectors.search_get(user=request.user, search_id=search_id)
        serializer = SearchDeploySerializer(data=request.data)
        serializer.is_valid(raise_exception=True)
        version = services.search_best_deploy(
            user=request.user,  # type: ignore[arg-type]
            search=search, model_name=serializer.validated_data["model_name"],
            tflite=serializer.validated_data["tflite"],
        )
        return Response(ModelVersionSerializer(version).data, status=status.HTTP_202_ACCEPTED)


class SearchCsvApi(APIView):
    @extend_schema(responses={(200, "text/csv"): OpenApiResponse(OpenApiTypes.STR)})
    def get(self, request: Request, search_id: int) -> HttpResponse:
        """The trials table as CSV: one row per trial, a column per hyperparameter."""
        search = selectors.search_get(user=request.user, search_id=search_id)
        return HttpResponse(search_csv(search=search), content_type="text/csv; charset=utf-8",
                            headers={"Content-Disposition":
                                     f'attachment; filename="search-{search.pk}.csv"'})


def search_csv(*, search: Search) -> str:
    data = search_detail_data(search=search)
    names = sorted(search.space)
    out = io.StringIO()
    header = ["trial", "experiment", *names, "state", "outcome", "rung", "epochs",
              f"best_{search.metric}", "best_epoch", "best_trial"]
    rows = ([row["index"], row["experiment"], *[row["params"].get(name) for name in names],
             row["state"], row["outcome"], row["rung"], row["epochs"], row["best_value"],
             row["best_epoch"], row["index"] == data["best_trial"]] for row in data["trials"])
    csv_write_rows(out=out, rows=[header, *rows])
    return out.getvalue()
