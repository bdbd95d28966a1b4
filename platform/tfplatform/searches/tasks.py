from celery import shared_task

from tfplatform.searches.services import search_advance

SEARCH_ADVANCE_TASK = "searches.search_advance"


@shared_task(name=SEARCH_ADVANCE_TASK, ignore_result=True, autoretry_for=(Exception,),
             retry_backoff=2, retry_backoff_max=60, max_retries=8)
def search_advance_task(search_id: int) -> None:
    """The step after one of the search's trials ended (services.search_advance); retried,
    since it only acts on what changed."""
    search_advance(search_id=search_id)
