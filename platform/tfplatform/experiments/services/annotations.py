"""What a team writes on its experiments: tags, a Markdown note, archived or not.

Whoever may see an experiment (its owner, their team, staff) may annotate it, as they may
cancel it: notes and tags are how a team shares what it learnt from a run.
"""

from collections.abc import Sequence
from typing import Literal

from django.contrib.auth.models import AnonymousUser
from django.db import transaction
from django.db.models import Count
from django.utils import timezone

from tfplatform.accounts.models import User
from tfplatform.core.annotations import annotations_apply
from tfplatform.core.errors import InvalidInput, NotFound
from tfplatform.core.notes import TAGS_MAX, tags_clean
from tfplatform.experiments.models import Experiment, ExperimentTag
from tfplatform.experiments.selectors.experiments import experiment_list

BULK_MAX = 500


BulkAction = Literal["tag", "untag", "archive", "unarchive"]


def experiment_annotate(*, experiment: Experiment, tags: Sequence[str] | None = None,
                        note: str | None = None, archived: bool | None = None) -> Experiment:
    """Replace what is given (all its tags, its note, archived); leave the rest."""
    return annotations_apply(obj=experiment, tag_model=ExperimentTag, tagged_field="experiment",
                             tags=tags, note=note, archived=archived)


def experiments_bulk_change(*, user: User | AnonymousUser, ids: Sequence[int],
                            action: BulkAction, tags: Sequence[str] = ()) -> int:
    """Apply `action` to every experiment of `ids`, or, if any is not the user's to see, to
    none of them (NotFound names them). Returns how many there were."""
    wanted = list(dict.fromkeys(ids))
    if not wanted or len(wanted) > BULK_MAX:
        raise InvalidInput(f"Choose 1 to {BULK_MAX} experiments.", field="ids")
    cleaned = tags_clean(tags=list(tags))
    if action in ("tag", "untag") and not cleaned:
        raise InvalidInput("Name the tags to add or remove.", field="tags")
    with transaction.atomic():
        found = list(experiment_list(user=user).filter(pk__in=wanted)
                     .select_for_update(of=("self",)).values_list("pk", flat=True))
        missing = sorted(set(wanted) - set(found))
        if missing:
            raise NotFound(f"Experiments not found: {', '.join(map(str, missing[:20]))}.")
        if action == "tag":
            _tags_add(experiment_ids=found, tags=cleaned)
        elif action == "untag":
            ExperimentTag.objects.filter(experiment_id__in=found, name__in=cleaned).delete()
        else:
            Experiment.objects.filter(pk__in=found).update(archived=action == "archive",
                                                           updated_at=timezone.now())
    return len(found)


def _tags_add(*, experiment_ids: list[int], tags: list[str]) -> None:
    ExperimentTag.objects.bulk_create(
        [ExperimentTag(experiment_id=pk, name=tag) for pk in experiment_ids for tag in tags],
        ignore_conflicts=True,
    )
    over = (ExperimentTag.objects.filter(experiment_id__in=experiment_ids)
            .values("experiment_id").annotate(n=Count("id")).filter(n__gt=TAGS_MAX)
            .values_list("experiment_id", flat=True).order_by("experiment_id").first())
    if over is not None:
        raise InvalidInput(
            f"An experiment holds at most {TAGS_MAX} tags (#{over} would have more).",
            field="tags")
