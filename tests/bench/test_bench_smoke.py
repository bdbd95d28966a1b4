"""`python -m bench --only dispatch` end to end: a real Celery worker, a real Redis, a report."""

import io
import logging
import os
import threading
from pathlib import Path

import pytest
import redis
from celery import current_app

from bench.__main__ import main
from bench.dispatch import dispatch_measure

REDIS_URL = os.environ.get("BENCH_REDIS_URL", "redis://127.0.0.1:6379/2")


@pytest.fixture
def redis_or_skip() -> None:
    try:
        redis.Redis.from_url(REDIS_URL).ping()
    except redis.RedisError as error:
        if os.environ.get("CI"):
            pytest.fail(f"CI needs Redis at {REDIS_URL}: {error}")
        pytest.skip(f"no Redis at {REDIS_URL}")


@pytest.mark.usefixtures("redis_or_skip")
@pytest.mark.filterwarnings("ignore:Call to deprecated setex")
def test_dispatch_item_writes_a_report(tmp_path: Path, capsys: pytest.CaptureFixture[str]
                                       ) -> None:
    assert main(["--only", "dispatch", "--quick", "--results", str(tmp_path)]) == 0
    [report] = tmp_path.glob("*-dispatch.md")
    text = report.read_text()
    assert "## 5. Celery dispatch" in text
    assert "| raw Redis round trip |" in text
    assert "Machine: " in text and " cores (" in text
    assert "Versions: Python 3.11" in text and "tensorflow " in text and "platform " in text
    assert "Celery round trip ÷ raw Redis round trip" in text
    assert "== 5. Celery dispatch" in capsys.readouterr().out


def test_unknown_items_are_refused(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        main(["--only", "everything"])
    assert "unknown item(s) everything" in capsys.readouterr().err


class _ClosesItsStream(logging.StreamHandler):  # type: ignore[type-arg]
    """Like absl's handler, which TensorFlow creates: closing it closes its stream."""

    def close(self) -> None:
        self.stream.close()
        super().close()


@pytest.mark.usefixtures("redis_or_skip")
@pytest.mark.filterwarnings("ignore:Call to deprecated setex")
@pytest.mark.filterwarnings("ignore:Task name 'bench.noop' is already registered")
def test_dispatch_leaves_the_process_logging_alone() -> None:
    # Reconfiguring logging closes every handler in the process; under pytest, absl's handler
    # then closed the capture file and the whole run died ("lost sys.stderr").
    stream = io.StringIO()
    handler = _ClosesItsStream(stream)
    result = dispatch_measure(broker_url=REDIS_URL, redis_url=REDIS_URL, count=3)
    assert len(result.celery_ms) == 3
    assert not stream.closed
    handler.close()


@pytest.mark.usefixtures("redis_or_skip")
@pytest.mark.filterwarnings("ignore:Call to deprecated setex")
@pytest.mark.filterwarnings("ignore:Task name 'bench.noop' is already registered")
def test_dispatch_leaves_the_process_celery_app_alone() -> None:
    # The benchmark's app had stayed current (and default, for other threads): every wake-up a
    # later test in the same process sent went to the benchmark's queue, and its node idled.
    platform_app = current_app._get_current_object()
    seen_by_a_thread = []
    dispatch_measure(broker_url=REDIS_URL, redis_url=REDIS_URL, count=1)
    thread = threading.Thread(target=lambda: seen_by_a_thread.append(current_app.main))
    thread.start()
    thread.join()
    assert current_app._get_current_object() is platform_app
    assert seen_by_a_thread == [platform_app.main]
