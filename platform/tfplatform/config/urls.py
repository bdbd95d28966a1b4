from django.contrib import admin
from django.urls import include, path
from drf_spectacular.views import SpectacularAPIView, SpectacularSwaggerView

from tfplatform.accounts.api import (
    TokenListApi,
    TokenObtainApi,
    TokenRevokeApi,
    TokenRevokeCurrentApi,
)
from tfplatform.accounts.oidc import OidcCallbackView, OidcSignInView
from tfplatform.audit.api import AuditEntryListApi
from tfplatform.cluster.api import NodeListApi, NodeStateApi
from tfplatform.cluster.spark_api import SparkClusterDetailApi, SparkClusterListApi
from tfplatform.datasets.api import DatasetDetailApi, DatasetListCreateApi
from tfplatform.experiments import api as experiments_api
from tfplatform.experiments import lineage_api as experiments_lineage_api
from tfplatform.experiments import search_api as experiments_search_api
from tfplatform.experiments.usage.api import UsageApi, UsageCsvApi
from tfplatform.modelregistry import api as models_api
from tfplatform.monitoring.api import HealthApi
from tfplatform.monitoring.views import cluster_health_page, metrics
from tfplatform.notifications import urls as notifications_urls
from tfplatform.searches import api as searches_api
from tfplatform.workspaces import api as workspace_api

# TF Serving's REST API on a model (/v1/models/<name>[/versions/<v>|/labels/<l>]...), so its
# clients work against /api with a platform token. The calls come first: a name pattern with
# no suffix would take "<name>:predict" too.
_MODEL_PATHS = (("", ""), ("/versions/<int:version>", "-version"),
                ("/labels/<str:label>", "-label"))
tf_serving_paths = [
    *(path(f"models/<str:name>{where}:{call}", models_api.PredictApi.as_view(), {"call": call},
           name=f"api-{call}{suffix}")
      for call in ("predict", "classify", "regress") for where, suffix in _MODEL_PATHS),
    *(path(f"models/<str:name>{where}/metadata", models_api.ModelStatusApi.as_view(),
           {"call": "metadata"}, name=f"api-model-metadata{suffix}")
      for where, suffix in _MODEL_PATHS),
    *(path(f"models/<str:name>{where}", models_api.ModelStatusApi.as_view(), {"call": "status"},
           name=f"api-model-status{suffix}")
      for where, suffix in _MODEL_PATHS),
]

api_v1 = [
    path("auth/token/", TokenObtainApi.as_view(), name="api-token"),
    path("auth/tokens/", TokenListApi.as_view(), name="api-tokens"),
    path("auth/tokens/current/", TokenRevokeCurrentApi.as_view(), name="api-token-current"),
    path("auth/tokens/<int:token_id>/", TokenRevokeApi.as_view(), name="api-token-revoke"),
    path("experiments/", experiments_api.ExperimentListCreateApi.as_view(), name="api-experiments"),
    path("experiments/bulk/", experiments_search_api.ExperimentBulkApi.as_view(),
         name="api-experiments-bulk"),
    path("experiments/tags/", experiments_search_api.ExperimentTagListApi.as_view(),
         name="api-experiment-tags"),
    path("workspaces/", workspace_api.WorkspaceListCreateApi.as_view(), name="api-workspaces"),
    path("workspaces/<int:workspace_id>/", workspace_api.WorkspaceDetailApi.as_view(),
         name="api-workspace"),
    path("workspaces/<int:workspace_id>/stop/", workspace_api.WorkspaceStopApi.as_view(),
         name="api-workspace-stop"),
    path("workspaces/<int:workspace_id>/start/", workspace_api.WorkspaceStartApi.as_view(),
         name="api-workspace-start"),
    path("workspaces/<int:workspace_id>/restart/", workspace_api.WorkspaceRestartApi.as_view(),
         name="api-workspace-restart"),
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
        "experiments/<int:experiment_id>/artifacts/",
        experiments_api.ExperimentArtifactListApi.as_view(),
        name="api-experiment-artifacts",
    ),
    path(
        "experiments/<int:experiment_id>/artifacts/<str:name>/",
        experiments_api.ExperimentArtifactApi.as_view(),
        name="api-experiment-artifact",
    ),
    path(
        "experiments/<int:experiment_id>/cancel/",
        experiments_api.ExperimentCancelApi.as_view(),
        name="api-experiment-cancel",
    ),
    path(
        "experiments/<int:experiment_id>/restart/",
        experiments_api.ExperimentRestartApi.as_view(),
        name="api-experiment-restart",
    ),
    path(
        "experiments/<int:experiment_id>/reproduce/",
        experiments_lineage_api.ExperimentReproduceApi.as_view(),
        name="api-experiment-reproduce",
    ),
    path(
        "experiments/<int:experiment_id>/lineage/",
        experiments_lineage_api.ExperimentLineageApi.as_view(),
        name="api-experiment-lineage",
    ),
    path(
        "environments/",
        experiments_api.EnvironmentListCreateApi.as_view(),
        name="api-environments",
    ),
    path(
        "environments/<int:environment_id>/",
        experiments_api.EnvironmentDetailApi.as_view(),
        name="api-environment",
    ),
    path("datasets/", DatasetListCreateApi.as_view(), name="api-datasets"),
    path("datasets/<int:dataset_id>/", DatasetDetailApi.as_view(), name="api-dataset"),
    path("searches/", searches_api.SearchListCreateApi.as_view(), name="api-searches"),
    path("searches/<int:search_id>/", searches_api.SearchDetailApi.as_view(), name="api-search"),
    path("searches/<int:search_id>/cancel/", searches_api.SearchCancelApi.as_view(),
         name="api-search-cancel"),
    path("searches/<int:search_id>/deploy-best/", searches_api.SearchDeployBestApi.as_view(),
         name="api-search-deploy-best"),
    path("searches/<int:search_id>/trials.csv", searches_api.SearchCsvApi.as_view(),
         name="api-search-csv"),
    path("usage/", UsageApi.as_view(), name="api-usage"),
    path("usage.csv", UsageCsvApi.as_view(), name="api-usage-csv"),
    path("nodes/", NodeListApi.as_view(), name="api-nodes"),
    path("spark-clusters/", SparkClusterListApi.as_view(), name="api-spark-clusters"),
    path("spark-clusters/<int:cluster_id>/", SparkClusterDetailApi.as_view(),
         name="api-spark-cluster"),
    path(
        "nodes/<int:node_id>/<str:action>/",
        NodeStateApi.as_view(),
        name="api-node-state",
    ),
    path("models/", models_api.ModelVersionListApi.as_view(), name="api-models"),
    # TF Serving's REST API, at its own paths below /api (tf_serving_paths above).
    *tf_serving_paths,
    path("serving/", models_api.ServingEndpointsApi.as_view(), name="api-serving"),
    path("models/<str:name>/", models_api.ModelDetailApi.as_view(), name="api-model"),
    path("models/<str:name>/labels/", models_api.ModelLabelApi.as_view(), name="api-model-labels"),
    path("models/<str:name>/health/", models_api.ModelHealthApi.as_view(), name="api-model-health"),
    path(
        "models/<str:name>/labels/<str:label>/",
        models_api.ModelLabelDeleteApi.as_view(),
        name="api-model-label",
    ),
    path(
        "models/<str:name>/versions/<int:version>/",
        models_api.ModelVersionApi.as_view(),
        name="api-model-version",
    ),
    path(
        "experiments/<int:experiment_id>/deploy/",
        models_api.ExperimentDeployApi.as_view(),
        name="api-experiment-deploy",
    ),
    path("health/", HealthApi.as_view(), name="api-health"),
    *notifications_urls.urlpatterns,
    path("audit/", AuditEntryListApi.as_view(), name="api-audit"),
]

urlpatterns = [
    path("admin/", admin.site.urls),
    path("metrics", metrics, name="metrics"),
    path("cluster/health/", cluster_health_page, name="cluster-health"),
    # Single sign-on (OpenID Connect); 404 while it is not configured. The names are
    # mozilla-django-oidc's, which its session check redirects with.
    path("oidc/authenticate/", OidcSignInView.as_view(), name="oidc_authentication_init"),
    path("oidc/callback/", OidcCallbackView.as_view(), name="oidc_authentication_callback"),
    path("api/v1/", include(api_v1)),
    path("api/schema/", SpectacularAPIView.as_view(), name="api-schema"),
    path("api/docs/", SpectacularSwaggerView.as_view(url_name="api-schema"), name="api-docs"),
    path("", include("tfplatform.web.urls")),
]

handler404 = "tfplatform.web.site_views.not_found"
handler500 = "tfplatform.web.site_views.server_error"
