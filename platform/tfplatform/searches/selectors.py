"""Reading searches: only those the user may see (owner, team, staff), and their trials."""

from dataclasses import dataclass

from django.contrib.auth.models import AnonymousUser
from django.db.models import Case, Count, Exists, Max, Min, OuterRef, Q, QuerySet, When

from tfplatform.accounts.models import User
from tfplatform.accounts.visibility import visible_to
from tfplatform.core.errors import NotFound
from tfplatform.experiments.models import Experiment, Metric
from tfplatform.searches.models import Search, SearchTag, SearchTrial

TEXT_WORDS_MAX = 10


def search_list(*, user: User | AnonymousUser) -> QuerySet[Search]:
    return visible_to(queryset=Search.objects.all(), user=user).select_related("owner")


def search_list_with_progress(*, user: User | AnonymousUser,
                              query: "SearchQuery | None" = None) -> QuerySet[Search]:
    """The visible searches `query` lets through (default: those not archived), each with
    `trials_started`, `trials_ended` and `best_value` (the best of its ended trials' values, by
    its own mode)."""
    return search_find(user=user, query=query or SearchQuery()).annotate(
        trials_started=Count("trials"),
        trials_ended=Count("trials", filter=~Q(trials__outcome=SearchTrial.Outcome.ACTIVE)),
        best_value=Case(When(mode="max", then=Max("trials__best_value")),
                        default=Min("trials__best_value")),
    )


@dataclass(frozen=True)
class SearchQuery:
    text: str = ""
    tags: tuple[str, ...] = ()
    # False: only those not archived (the list's default); True: only archived; None: both.
    archived: bool | None = False
    owner: str = ""
    states: tuple[str, ...] = ()


def search_find(*, user: User | AnonymousUser, query: SearchQuery) -> QuerySet[Search]:
    """The visible searches the query lets through: each word in the name, a tag or the note,
    every tag, and owner and state as given."""
    searches = search_list(user=user)
    if query.archived is not None:
        searches = searches.filter(archived=query.archived)
    for word in query.text.split()[:TEXT_WORDS_MAX]:
        searches = searches.filter(
            Q(name__icontains=word) | Q(note__icontains=word)
            | Exists(SearchTag.objects.filter(search=OuterRef("pk"), name__icontains=word)))
    for tag in query.tags:
        searches = searches.filter(
            Exists(SearchTag.objects.filter(search=OuterRef("pk"), name=tag)))
    if query.owner:
        searches = searches.filter(owner__username=query.owner)
    if query.states:
        searches = searches.filter(state__in=query.states)
    return searches.prefetch_related("tags")


def search_get(*, user: User | AnonymousUser, search_id: int) -> Search:
    # Someone else's search is "not found", never "forbidden": ids reveal nothing.
    search = search_list(user=user).filter(pk=search_id).first()
    if search is None:
        raise NotFound("Search not found.")
    return search


def search_trials(*, search: Search) -> QuerySet[SearchTrial]:
    return search.trials.select_related("experiment", "search").order_by("index")


def search_best_trial(*, search: Search) -> SearchTrial | None:
    """The trial with the best value of the search's metric among those whose experiment
    completed (so it has an exported model); ties go to the earlier trial."""
    order = "-best_value" if search.mode == "max" else "best_value"
    return (search_trials(search=search)
            .filter(best_value__isnull=False, experiment__state=Experiment.State.COMPLETED)
            .order_by(order, "index").first())


def search_trial_values(*, search: Search,
                        experiment_id: int | None = None) -> dict[int, dict[int, float]]:
    """Per trial (experiment id), its metric by epoch so far (of one trial's experiment, with
    `experiment_id`): the live table and the chart read these while trials still train, and
    a trial's rung is judged on them."""
    metrics = Metric.objects.filter(trial__experiment__search_trial__search=search)
    if experiment_id is not None:
        metrics = metrics.filter(trial__experiment_id=experiment_id)
    rows = (metrics.filter(name=search.metric, epoch__isnull=False, epoch__gte=1)
            .order_by("recorded_at", "id")
            .values_list("trial__experiment_id", "epoch", "value"))
    values: dict[int, dict[int, float]] = {}
    for member, epoch, value in rows:
        values.setdefault(member, {})[int(epoch or 0)] = float(value)
    return values


def search_trial_of(*, experiment: Experiment) -> SearchTrial | None:
    """The search trial an experiment trains, if it is one: its page links back to the search."""
    return SearchTrial.objects.select_related("search").filter(experiment=experiment).first()
