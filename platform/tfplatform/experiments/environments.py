"""Writes to environments: staff create, edit and delete them (each an audit row, `actor`
the staff member); each node builds them.

A node builds an environment (a venv, training.isolation.venvs; under docker/podman a derived
image, training.isolation.images) the first time one of its trials needs it, and records the
build per environment and node: state, and the end of its log.
"""

from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from django.conf import settings
from django.db import IntegrityError, transaction
from django.db.models import ProtectedError
from django.utils import timezone

from tfplatform.audit.models import AuditAction
from tfplatform.audit.services import Actor, audit_changes, audit_record, audit_snapshot
from tfplatform.cluster.models import Node
from tfplatform.core.errors import Conflict, InvalidInput, PlatformError
from tfplatform.experiments.models import (
    Environment,
    EnvironmentBuild,
    EnvironmentRevision,
    Experiment,
)
from tfplatform.experiments.revisions import environment_revision_ensure
from tfplatform.experiments.services.transitions import experiment_set_pending_reason
from training import errors as training_errors
from training.isolation import images, venvs
from training.isolation.container_settings import ContainerSettings
from training.isolation.containers import image_runs_host_python
from training.isolation.runtime import Runtime, TaskPython

Build = EnvironmentBuild.State
BUILD_LOG_KEEP_BYTES = 64 * 1024
TEXT_FIELDS = {"name": 100, "image": 300, "tensorflow_version": 20}
AUDITED_FIELDS = ("name", "image", "tensorflow_version", "gpu_capable", "extra_packages")


class EnvironmentBuildFailed(PlatformError):
    """A trial's environment could not be built on its node: the trial fails for good."""


def environment_packages_clean(*, packages: object) -> list[str]:
    """Staff's requirements as stored: pinned, normalized, sorted; the form and admin use it."""
    try:
        return venvs.environment_packages_validate(packages=packages)
    except training_errors.InvalidInput as error:
        raise InvalidInput(str(error), field="extra_packages") from error


def environment_create(
    *,
    name: str,
    image: str,
    tensorflow_version: str,
    gpu_capable: bool = False,
    extra_packages: Sequence[str] = (),
    actor: Actor = None,
) -> Environment:
    environment = Environment(
        **_texts_clean(name=name, image=image, tensorflow_version=tensorflow_version),
        gpu_capable=gpu_capable,
        extra_packages=environment_packages_clean(packages=list(extra_packages)),
    )
    with transaction.atomic():
        _save(environment=environment)
        environment_revision_ensure(environment=environment)
        audit_record(actor=actor, action=AuditAction.ENVIRONMENT_CREATE, target=environment,
                     before=None, after=audit_snapshot(obj=environment, fields=AUDITED_FIELDS))
    return environment


def environment_update(
    *,
    environment: Environment,
    name: str | None = None,
    image: str | None = None,
    tensorflow_version: str | None = None,
    gpu_capable: bool | None = None,
    extra_packages: Sequence[str] | None = None,
    actor: Actor = None,
) -> Environment:
    """Change what is given. New packages make each node build a new venv when next needed;
    the old one stays cached under its own key."""
    texts = {"name": name, "image": image, "tensorflow_version": tensorflow_version}
    changes: dict[str, Any] = _texts_clean(**{k: v for k, v in texts.items() if v is not None})
    if gpu_capable is not None:
        changes["gpu_capable"] = gpu_capable
    if extra_packages is not None:
        changes["extra_packages"] = environment_packages_clean(packages=list(extra_packages))
    with transaction.atomic():
        current = Environment.objects.select_for_update().get(pk=environment.pk)
        packages_changed = changes.get("extra_packages", current.extra_packages) != (
            current.extra_packages
        )
        before = audit_snapshot(obj=current, fields=AUDITED_FIELDS)
        for field, value in changes.items():
            setattr(current, field, value)
        _save(environment=current)
        environment_revision_ensure(environment=current)
        old, new = audit_changes(before=before,
                                 after=audit_snapshot(obj=current, fields=AUDITED_FIELDS))
        if new:
            audit_record(actor=actor, action=AuditAction.ENVIRONMENT_CHANGE, target=current,
                         before=old, after=new)
        if packages_changed:
            # Builds of the old packages say nothing about the new ones.
            current.builds.all().delete()
    environment.refresh_from_db()
    return environment


def environment_delete(*, environment: Environment, actor: Actor = None) -> None:
    used = environment.experiments.count()
    if used:
        raise Conflict(
            f"Environment '{environment.name}' is used by {used} experiment"
            f"{'s' if used != 1 else ''}; only an unused environment can be deleted."
        )
    try:
        with transaction.atomic():
            audit_record(actor=actor, action=AuditAction.ENVIRONMENT_DELETE, target=environment,
                         before=audit_snapshot(obj=environment, fields=AUDITED_FIELDS),
                         after=None)
            environment.delete()
    except ProtectedError as error:  # an experiment chose it meanwhile
        raise Conflict(f"Environment '{environment.name}' is in use.") from error


def _texts_clean(**texts: str) -> dict[str, str]:
    cleaned = {}
    for field, value in texts.items():
        value = value.strip()
        if not value:
            raise InvalidInput("This field may not be blank.", field=field)
        if len(value) > TEXT_FIELDS[field]:
            raise InvalidInput(
                f"At most {TEXT_FIELDS[field]} characters, not {len(value)}.", field=field
            )
        cleaned[field] = value
    return cleaned


def _save(*, environment: Environment) -> None:
    taken = Environment.objects.filter(name=environment.name).exclude(pk=environment.pk)
    if taken.exists():
        raise InvalidInput(f"An environment named '{environment.name}' exists.", field="name")
    try:
        with transaction.atomic():
            environment.save()
    except IntegrityError as error:  # the same name saved meanwhile
        raise InvalidInput(
            f"An environment named '{environment.name}' exists.", field="name"
        ) from error


def environments_dir() -> Path:
    return Path(settings.PLATFORM.environments_dir)


@dataclass(frozen=True)
class _BuildPlan:
    key: str
    built: bool
    log_path: Path
    prepare: Callable[[], TaskPython]  # builds unless built; returns the trial's interpreter


def environment_build_ensure(
    *,
    environment: Environment | None,
    node: Node | None,
    experiment: Experiment | None = None,
    runtime: Runtime | None = None,
) -> TaskPython:
    """The interpreter (and, under docker/podman, the image) this node runs `environment`'s
    trials with, building it first if needed: meanwhile `experiment` shows it as its pending
    reason. Without a node (a trial run outside the scheduler) the build happens unrecorded.

    A sandbox node, and a container node for an image that runs the node's own runtime, layer a
    venv of the pinned packages on that runtime; a container node derives an image from any
    other (training.isolation.images). Raises EnvironmentBuildFailed, whose message is the
    user's error.
    """
    if environment is None:
        return TaskPython()
    hostname = node.hostname if node is not None else settings.PLATFORM.node_name
    try:
        # An experiment's trials build the revision it pinned, whatever the environment holds
        # now (a reproduction runs on the packages of the run it reproduces).
        plan = _plan(environment=environment, runtime=runtime,
                     revision=experiment.environment_revision if experiment is not None else None)
    except training_errors.EnvironmentBuildFailed as error:
        raise _failure(environment=environment, hostname=hostname,
                       reason=f"{error}: {error.log_tail}") from error
    except training_errors.InvalidInput as error:  # stored before packages were validated
        raise _failure(environment=environment, hostname=hostname, reason=str(error)) from error
    if isinstance(plan, TaskPython):
        return plan  # nothing to build
    build = None
    if node is not None:
        build, _ = EnvironmentBuild.objects.get_or_create(
            environment=environment, node=node, key=plan.key
        )
        if plan.built and build.state == Build.READY:
            return plan.prepare()
    reason = f"Building environment '{environment.name}' on {hostname}."
    if not plan.built:
        _build_record(build=build, state=Build.BUILDING, log="", started=True)
        if experiment is not None:
            experiment_set_pending_reason(experiment=experiment, reason=reason)
    try:
        python = plan.prepare()
    except training_errors.EnvironmentBuildFailed as error:
        _build_record(build=build, state=Build.FAILED, log=_log_tail(plan.log_path))
        raise _failure(environment=environment, hostname=hostname, reason=error.log_tail) from error
    finally:
        if experiment is not None and not plan.built:
            experiment_set_pending_reason(experiment=experiment, reason="", replacing=reason)
    _build_record(build=build, state=Build.READY, log=_log_tail(plan.log_path))
    return python


def _plan(*, environment: Environment, runtime: Runtime | None,
          revision: EnvironmentRevision | None = None) -> _BuildPlan | TaskPython:
    """What building `environment` (or its `revision`) means on this node, or its interpreter
    if nothing."""
    packages = list(revision.packages if revision is not None else environment.extra_packages)
    root = environments_dir()
    containers = runtime.containers if runtime is not None else None
    image = revision.image if revision is not None else environment.image
    if containers is not None and image == containers.node_image and not packages:
        return TaskPython()  # what the node's warm containers run
    if containers is not None and not _runs_node_runtime(containers=containers, image=image):
        key = images.image_key(settings=containers, base=image, packages=packages)
        return _BuildPlan(
            key=key, built=images.image_built(settings=containers, key=key),
            log_path=root / f"image-{key}.log",
            prepare=lambda: images.image_derive(settings=containers, base=image,
                                                packages=packages, key=key,
                                                log_path=root / f"image-{key}.log"),
        )
    # The node's own runtime: a venv of the packages, in whichever image shows that runtime.
    image_of = (
        (lambda python: replace(python, image=image, key=f"{python.key}@{image}"))
        if containers is not None and image != containers.node_image else (lambda python: python)
    )
    if not packages:
        return image_of(TaskPython())
    key = venvs.environment_key(packages=packages, base=venvs.node_runtime_identity())
    log_path = root / f"{key}.log"
    return _BuildPlan(
        key=key, built=venvs.environment_built(key=key, root=root), log_path=log_path,
        prepare=lambda: image_of(
            venvs.environment_prepare(packages=packages, root=root, log_path=log_path)
        ),
    )


def _runs_node_runtime(*, containers: ContainerSettings, image: str) -> bool:
    """Whether `image` runs the node's own Python runtime, mounted (a venv can layer on it)."""
    try:
        return image_runs_host_python(settings=containers, image=image)
    except training_errors.InvalidInput:
        return False  # not on the node: the derived build pulls it, or says why it cannot


def _build_record(
    *, build: EnvironmentBuild | None, state: str, log: str, started: bool = False
) -> None:
    if build is None:
        return
    now = timezone.now()
    changes: dict[str, Any] = {"state": state, "log": log}
    changes |= {"started_at": now, "finished_at": None} if started else {"finished_at": now}
    # By pk: a build whose environment got new packages meanwhile stays deleted.
    EnvironmentBuild.objects.filter(pk=build.pk).update(**changes)


def _log_tail(path: Path) -> str:
    return venvs.log_tail(path=path, max_bytes=BUILD_LOG_KEEP_BYTES)


def _failure(*, environment: Environment, hostname: str, reason: str) -> EnvironmentBuildFailed:
    return EnvironmentBuildFailed(
        f"Environment '{environment.name}' failed to build on {hostname}: {reason}"
    )
