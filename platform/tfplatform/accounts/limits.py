"""What one user may hold, queue and run at once: their team's quotas and limits, the platform's
for a user without a team or where the team leaves a limit empty.

Quotas (GPUs, CPU slots) are shared by a team's members; the limits (queued, running,
workspaces) apply to each member on their own, so that no one user fills the team's share or
the queue. A limit of 0 is no limit; staff have none.
"""

from dataclasses import dataclass

from django.conf import settings

from tfplatform.accounts.models import Team, User

NO_LIMIT = 0


@dataclass(frozen=True, kw_only=True)
class Limits:
    gpu_quota: int  # guaranteed
    cpu_slot_quota: int
    # With borrowing of what other teams leave idle: at least the quotas.
    gpu_limit: int
    cpu_slot_limit: int
    over_quota_weight: int
    max_queued: int
    max_running: int
    max_workspaces: int
    # Whose quota it is, as messages name it.
    quota_owner: str


def limits_resolve(
    *, team_gpu_quota: int | None, team_cpu_slot_quota: int | None,
    team_max_queued: int | None = None, team_max_running: int | None = None,
    team_max_workspaces: int | None = None, has_team: bool,
    team_gpu_limit: int | None = None, team_cpu_slot_limit: int | None = None,
    team_weight: int = 1,
) -> Limits:
    """From plain values, so that a scheduling pass resolves a thousand without model rows."""
    platform = settings.PLATFORM
    if not has_team:  # a user without a team borrows nothing
        team_gpu_quota, team_cpu_slot_quota = platform.user_gpu_quota, platform.user_cpu_slot_quota
        team_gpu_limit = team_cpu_slot_limit = None
    gpu_quota, cpu_slot_quota = int(team_gpu_quota or 0), int(team_cpu_slot_quota or 0)
    return Limits(
        gpu_quota=gpu_quota,
        cpu_slot_quota=cpu_slot_quota,
        gpu_limit=max(gpu_quota, team_gpu_limit or 0),
        cpu_slot_limit=max(cpu_slot_quota, team_cpu_slot_limit or 0),
        over_quota_weight=max(1, team_weight),
        max_queued=platform.user_max_queued if team_max_queued is None else team_max_queued,
        max_running=platform.user_max_running if team_max_running is None else team_max_running,
        max_workspaces=(platform.user_max_workspaces if team_max_workspaces is None
                        else team_max_workspaces),
        quota_owner="your team's" if has_team else "your",
    )


def limits_of(*, user: User) -> Limits:
    team: Team | None = user.team
    if team is None:
        return limits_resolve(team_gpu_quota=None, team_cpu_slot_quota=None, has_team=False)
    return limits_resolve(
        team_gpu_quota=team.gpu_quota, team_cpu_slot_quota=team.cpu_slot_quota,
        team_max_queued=team.user_max_queued, team_max_running=team.user_max_running,
        team_max_workspaces=team.user_max_workspaces, has_team=True,
        team_gpu_limit=team.gpu_limit, team_cpu_slot_limit=team.cpu_slot_limit,
        team_weight=team.over_quota_weight,
    )
