from typing import Any

from django.core.management.base import BaseCommand, CommandError

from tfplatform.modelregistry.services.access import serving_access_push


class Command(BaseCommand):
    help = ("Push the current tokens and model routes to the model server's front now (the "
            "scheduler loop does so every TF_SERVING_FRONT_REFRESH_SECONDS, the web app at "
            "each change).")

    def handle(self, *args: Any, **options: Any) -> None:
        if not serving_access_push():
            raise CommandError("The model server's front did not take the access table (is "
                               "TF_SERVING_FRONT_REFRESH_SECONDS 0, or the server down?).")
        self.stdout.write("Pushed.")
