from django.apps import AppConfig


class WorkspacesConfig(AppConfig):
    name = "tfplatform.workspaces"
    label = "workspaces"

    def ready(self) -> None:
        from tfplatform.experiments.models import Experiment
        from tfplatform.experiments.sessions import SessionHooks, session_hooks_register
        from tfplatform.experiments.signals import scheduler_passing
        from tfplatform.workspaces.receivers import workspaces_cull_on_scheduler_pass
        from tfplatform.workspaces.relay import workspace_relay_node_start
        from tfplatform.workspaces.services import (
            workspace_activity_record,
            workspace_session_begin,
            workspace_session_end,
        )

        session_hooks_register(kind=Experiment.Kind.WORKSPACE, hooks=SessionHooks(
            begin=workspace_session_begin, end=workspace_session_end,
            activity_record=workspace_activity_record, node_start=workspace_relay_node_start))
        scheduler_passing.connect(workspaces_cull_on_scheduler_pass, dispatch_uid="workspaces-cull")
