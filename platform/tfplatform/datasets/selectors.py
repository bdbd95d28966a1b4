"""Reading registered datasets: only those the user may see (owner, team, staff)."""

from django.contrib.auth.models import AnonymousUser
from django.db.models import Q, QuerySet

from tfplatform.accounts.models import User
from tfplatform.accounts.visibility import visible_to
from tfplatform.core.errors import InvalidInput, NotFound
from tfplatform.datasets.models import Dataset


def dataset_list(*, user: User | AnonymousUser) -> QuerySet[Dataset]:
    return visible_to(queryset=Dataset.objects.all(), user=user).select_related("owner", "team")


def dataset_get(*, user: User | AnonymousUser, dataset_id: int) -> Dataset:
    # Someone else's dataset is "not found", never "forbidden": ids reveal nothing.
    dataset = dataset_list(user=user).filter(pk=dataset_id).first()
    if dataset is None:
        raise NotFound("Dataset not found.")
    return dataset


def dataset_for_name(*, user: User, name: str) -> Dataset | None:
    """The dataset a submission names: the user's own first, then their team's; None when the
    user sees none of that name. Staff see every team's, so a name several teams use is
    refused as ambiguous rather than guessed."""
    found = list(dataset_list(user=user).filter(name=name)[:50])
    if len(found) <= 1:
        return found[0] if found else None
    for mine in (Q(owner=user), Q(team_id=user.team_id) if user.team_id else None):
        if mine is not None:
            narrowed = [d for d in dataset_list(user=user).filter(mine, name=name)]
            if len(narrowed) == 1:
                return narrowed[0]
    raise InvalidInput(
        f"Several datasets you can see are named '{name}' (other teams'); ask their owners "
        "or register your own under another name.",
        field="dataset",
    )
