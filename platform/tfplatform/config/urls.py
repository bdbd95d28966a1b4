from django.contrib import admin
from django.urls import include, path
from drf_spectacular.views import SpectacularAPIView, SpectacularSwaggerView

from tfplatform.accounts.api import TokenObtainApi
from tfplatform.cluster.api import NodeListApi
from tfplatform.experiments import api as experiments_api
from tfplatform.modelregistry.api import ModelVersionListApi

api_v1 = [
    path("auth/token/", TokenObtainApi.as_view(), name="api-token"),
    path("experiments/", experiments_api.ExperimentListCreateApi.as_view(), name="api-experiments"),
    path(
        "experiments/<int:experiment_id>/",
        experiments_api.ExperimentDetailApi.as_view(),
        name="api-experiment",
    ),
    path(
        "experiments/<int:experiment_id>/metrics/",
        experiments_api.ExperimentMetricsApi.as_view(),
        name="api-experiment-metrics",
    ),
    path(
        "experiments/<int:experiment_id>/logs/",
        experiments_api.ExperimentLogsApi.as_view(),
        name="api-experiment-logs",
    ),
    path(
        "experiments/<int:experiment_id>/cancel/",
        experiments_api.ExperimentCancelApi.as_view(),
        name="api-experiment-cancel",
    ),
    path("environments/", experiments_api.EnvironmentListApi.as_view(), name="api-environments"),
    path("nodes/", NodeListApi.as_view(), name="api-nodes"),
    path("models/", ModelVersionListApi.as_view(), name="api-models"),
]

urlpatterns = [
    path("admin/", admin.site.urls),
    path("api/v1/", include(api_v1)),
    path("api/schema/", SpectacularAPIView.as_view(), name="api-schema"),
    path("api/docs/", SpectacularSwaggerView.as_view(url_name="api-schema"), name="api-docs"),
    path("", include("tfplatform.web.urls")),
]

handler404 = "tfplatform.web.views.not_found"
handler500 = "tfplatform.web.views.server_error"
