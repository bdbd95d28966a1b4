"""`GET /api/v1/health/` (staff): the operators' health page as JSON (monitoring/health.py)."""

from drf_spectacular.utils import extend_schema
from rest_framework import permissions, serializers
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from tfplatform.monitoring.health import component_health_list, health_overall

STATUSES = ["ok", "degraded", "down"]


class ComponentHealthSerializer(serializers.Serializer[object]):
    name = serializers.CharField()
    status = serializers.ChoiceField(choices=STATUSES)
    detail = serializers.CharField(help_text="What the check found, or why it failed.")
    seconds = serializers.FloatField(help_text="How long the check took.")


class PlatformHealthSerializer(serializers.Serializer[object]):
    status = serializers.ChoiceField(choices=STATUSES,
                                     help_text="The worst of the components' statuses.")
    components = ComponentHealthSerializer(many=True)


class HealthApi(APIView):
    """Staff: every component (database, broker, cache, scheduler, worker nodes, model server,
    storage) as the web app finds it now; 200 whatever they say, for the body tells."""

    permission_classes = [permissions.IsAdminUser]

    @extend_schema(responses=PlatformHealthSerializer)
    def get(self, request: Request) -> Response:
        components = component_health_list()
        return Response(PlatformHealthSerializer(
            {"status": health_overall(components=components), "components": components}).data)
