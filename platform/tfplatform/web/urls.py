from django.contrib.auth import views as auth_views
from django.urls import path
from django.views.generic import RedirectView

from tfplatform.web import cluster_views, views

urlpatterns = [
    path("", RedirectView.as_view(pattern_name="experiment-list"), name="home"),
    path("healthz", views.healthz, name="healthz"),
    path("login/", auth_views.LoginView.as_view(), name="login"),
    path("logout/", auth_views.LogoutView.as_view(), name="logout"),
    path("experiments/", views.experiment_list_page, name="experiment-list"),
    path("experiments/new/", views.experiment_new_page, name="experiment-new"),
    path(
        "experiments/<int:experiment_id>/", views.experiment_detail_page, name="experiment-detail"
    ),
    path(
        "experiments/<int:experiment_id>/cancel/",
        views.experiment_cancel_action,
        name="experiment-cancel",
    ),
    path(
        "experiments/<int:experiment_id>/deploy/",
        views.experiment_deploy_action,
        name="experiment-deploy",
    ),
    path("models/", views.model_list_page, name="model-list"),
    path("models/<str:name>/", views.model_detail_page, name="model-detail"),
    path("models/<str:name>/action/", views.model_action, name="model-action"),
    path("cluster/", cluster_views.cluster_page, name="cluster"),
    path(
        "cluster/nodes/<int:node_id>/state/",
        cluster_views.cluster_node_action,
        name="cluster-node-state",
    ),
]
