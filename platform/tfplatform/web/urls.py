from django.contrib.auth import views as auth_views
from django.urls import path
from django.views.generic import RedirectView

from tfplatform.web import (
    account_views,
    board_views,
    cluster_views,
    compare_views,
    environment_views,
    model_views,
    search_views,
    site_views,
)
from tfplatform.web import experiment_views as experiments

urlpatterns = [
    path("", RedirectView.as_view(pattern_name="experiment-list"), name="home"),
    path("healthz", site_views.healthz, name="healthz"),
    path("login/", auth_views.LoginView.as_view(), name="login"),
    path("logout/", auth_views.LogoutView.as_view(), name="logout"),
    path("account/tokens/", account_views.token_list_page, name="account-tokens"),
    path("account/tokens/<int:token_id>/revoke/", account_views.token_revoke_action,
         name="account-token-revoke"),
    path("account/password/", account_views.PasswordChangePage.as_view(),
         name="account-password"),
    path("experiments/", experiments.experiment_list_page, name="experiment-list"),
    path("experiments/new/", experiments.experiment_new_page, name="experiment-new"),
    path("experiments/new/fit/", experiments.experiment_fit_fragment, name="experiment-fit"),
    path("experiments/compare/", compare_views.compare_page, name="experiment-compare"),
    path("experiments/compare.csv", compare_views.compare_csv, name="experiment-compare-csv"),
    path("experiments/tensorboard/", board_views.board_open_page, name="experiment-tensorboard"),
    path("tensorboard/<str:key>", board_views.board_proxy_view, name="tensorboard-root"),
    path("tensorboard/<str:key>/", board_views.board_proxy_view, name="tensorboard"),
    path("tensorboard/<str:key>/<path:rest>", board_views.board_proxy_view,
         name="tensorboard-path"),
    path(
        "experiments/<int:experiment_id>/",
        experiments.experiment_detail_page,
        name="experiment-detail",
    ),
    path(
        "experiments/<int:experiment_id>/artifacts/<str:name>/",
        experiments.experiment_artifact_download,
        name="experiment-artifact",
    ),
    path(
        "experiments/<int:experiment_id>/live/",
        experiments.experiment_live_fragment,
        name="experiment-live",
    ),
    path(
        "experiments/<int:experiment_id>/charts.json",
        experiments.experiment_chart_json,
        name="experiment-charts",
    ),
    path(
        "experiments/<int:experiment_id>/cancel/",
        experiments.experiment_cancel_action,
        name="experiment-cancel",
    ),
    path(
        "experiments/<int:experiment_id>/restart/",
        experiments.experiment_restart_action,
        name="experiment-restart",
    ),
    path(
        "experiments/<int:experiment_id>/deploy/",
        experiments.experiment_deploy_action,
        name="experiment-deploy",
    ),
    path("searches/", search_views.search_list_page, name="search-list"),
    path("searches/new/", search_views.search_new_page, name="search-new"),
    path("searches/<int:search_id>/", search_views.search_detail_page, name="search-detail"),
    path("searches/<int:search_id>/live/", search_views.search_live_fragment,
         name="search-live"),
    path("searches/<int:search_id>/cancel/", search_views.search_cancel_action,
         name="search-cancel"),
    path("searches/<int:search_id>/deploy-best/", search_views.search_deploy_action,
         name="search-deploy-best"),
    path("models/", model_views.model_list_page, name="model-list"),
    path("models/<str:name>/", model_views.model_detail_page, name="model-detail"),
    path("models/<str:name>/action/", model_views.model_action, name="model-action"),
    path("models/<str:name>/predict/", model_views.model_predict_action, name="model-predict"),
    path("environments/", environment_views.environment_list_page, name="environment-list"),
    path("environments/new/", environment_views.environment_new_page, name="environment-new"),
    path(
        "environments/<int:environment_id>/",
        environment_views.environment_edit_page,
        name="environment-edit",
    ),
    path(
        "environments/<int:environment_id>/delete/",
        environment_views.environment_delete_action,
        name="environment-delete",
    ),
    path(
        "environments/builds/<int:build_id>/",
        environment_views.environment_build_log_page,
        name="environment-build-log",
    ),
    path("cluster/", cluster_views.cluster_page, name="cluster"),
    path(
        "cluster/nodes/<int:node_id>/state/",
        cluster_views.cluster_node_action,
        name="cluster-node-state",
    ),
]
