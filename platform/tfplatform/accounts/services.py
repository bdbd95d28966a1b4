from tfplatform.accounts.models import Team, User


def admin_ensure(*, username: str, password: str) -> bool:
    """Create a superuser unless one exists; True when one was created."""
    if User.objects.filter(is_superuser=True).exists():
        return False
    User.objects.create_superuser(username=username, password=password, email="")
    return True


def user_create(
    *, username: str, password: str, team: Team | None = None, is_staff: bool = False
) -> User:
    user = User.objects.create_user(username=username, password=password)
    user.team = team
    user.is_staff = is_staff
    user.save(update_fields=["team", "is_staff"])
    return user
