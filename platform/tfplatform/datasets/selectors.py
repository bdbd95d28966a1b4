"""Reading registered datasets: only those the user may see (owner, team, staff)."""

from django.contrib.auth.models import AnonymousUser
from django.db.models import QuerySet

from tfplatform.accounts.models import User
from tfplatform.accounts.visibility import visible_to
from tfplatform.core.errors import InvalidInput, NotFound
from tfplatform.datasets.models import Dataset

# More versions of one name than a submission looks through: far more than anyone keeps.
VERSIONS_MAX = 10_000


def dataset_list(*, user: User | AnonymousUser) -> QuerySet[Dataset]:
    """Every version the user may see, deleted ones left out."""
    return visible_to(queryset=Dataset.objects.filter(deleted_at__isnull=True), user=user) \
        .select_related("owner", "team")


def dataset_get(*, user: User | AnonymousUser, dataset_id: int) -> Dataset:
    # Someone else's dataset is "not found", never "forbidden": ids reveal nothing.
    dataset = dataset_list(user=user).filter(pk=dataset_id).first()
    if dataset is None:
        raise NotFound("Dataset not found.")
    return dataset


def dataset_reference_split(*, reference: str) -> tuple[str, int | None]:
    """`name` or `name@version` as (name, version); a dataset's name never holds '@'."""
    name, at, version = reference.partition("@")
    if not at:
        return reference, None
    if not (version.isascii() and version.isdigit()) or len(version) > 9 or int(version) < 1:
        raise InvalidInput(f"'{reference}': a version is a whole number from 1, as in "
                           f"'{name}@2'.", field="dataset")
    return name, int(version)


def dataset_for_name(*, user: User, name: str, version: int | None = None) -> Dataset | None:
    """The version a submission names: `version`, else the newest; None when the user sees no
    dataset of that name. Of several holders' (staff see every team's), the user's own, then
    their team's; otherwise the name is refused as ambiguous rather than guessed."""
    rows = list(dataset_list(user=user).filter(name=name).order_by("-version")
                .values_list("pk", "team_id", "owner_id", "version")[:VERSIONS_MAX])
    if not rows:
        return None
    holders = {_holder(team_id, owner_id) for _, team_id, owner_id, _ in rows}
    if len(holders) > 1:
        mine = [key for key in (("user", user.pk), ("team", user.team_id)) if key in holders]
        if not mine:
            raise InvalidInput(
                f"Several datasets you can see are named '{name}' (other teams'); ask their "
                "owners or register your own under another name.",
                field="dataset",
            )
        holders = {mine[0]}
    versions = [(pk, number) for pk, team_id, owner_id, number in rows
                if _holder(team_id, owner_id) in holders]
    chosen = versions[0][0] if version is None else next(
        (pk for pk, number in versions if number == version), None)
    if chosen is None:
        known = ", ".join(str(number) for _, number in sorted(versions, key=lambda v: v[1]))
        raise InvalidInput(f"Dataset '{name}' has no version {version}; its versions: {known}.",
                           field="dataset")
    return dataset_list(user=user).get(pk=chosen)


def dataset_version_readable(*, user: User, dataset_id: int) -> Dataset | None:
    """A pinned version as the experiment's owner may still read it: None once deleted (or no
    longer theirs to see)."""
    return dataset_list(user=user).filter(pk=dataset_id).first()


def _holder(team_id: int | None, owner_id: int) -> tuple[str, int]:
    return ("team", team_id) if team_id is not None else ("user", owner_id)
