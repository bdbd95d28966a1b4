"""The suite keeps its files and broker apart from a `make run` in the same checkout: a platform
worker running there must not take the suite's tasks, nor the suite's workers take its own."""

from django.conf import settings


def test_the_suite_has_a_var_directory_of_its_own() -> None:
    ours, make_runs = settings.VAR_DIR, settings.ROOT_DIR / "var"
    assert ours == make_runs / "test"
    for path in (settings.PLATFORM["MODEL_BASE_PATH"], settings.PLATFORM["WORK_DIR"]):
        assert path.is_relative_to(ours)
    if settings.CELERY_BROKER_URL.startswith("filesystem://"):
        folders = settings.CELERY_BROKER_TRANSPORT_OPTIONS
        assert folders["data_folder_in"] == str(ours / "broker")
