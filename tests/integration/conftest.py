"""Integration fixtures: the real Kafka broker and Redis server that ``make test`` starts.

A missing service is a failure, not a skip: the test command starts both
(``docker/services.sh up``), so absence means the environment is broken.
"""

from __future__ import annotations

import asyncio
import os
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

from loopwatch.config.stream_settings import parse_stream_settings
from loopwatch.streams.kafka.connect import wait_for_broker
from tests.gateway_process import gateway_process
from tests.integration.harness import Names, WorkerProcess

# the real-CLI tests' shared checks (imported after this file) assert too: pytest explains them
pytest.register_assert_rewrite("tests.integration.runtimes")

if TYPE_CHECKING:
    from tests.integration.runtimes.codex_cli import Codex
    from tests.integration.runtimes.gemini_cli import Gemini

pytestmark = pytest.mark.integration


@pytest.fixture(scope="session", autouse=True)
def _topics_deleted_at_the_end() -> Iterator[None]:
    """After the session, the topics its tests made on the shared broker are deleted (only
    theirs: another session may be using the broker at the same time). A broker that serves
    run after run kept every test's topics before: ~5,000 of them, 16 GB, filled a disk."""
    from tests.integration.harness import CREATED_APP_IDS, delete_topics

    yield
    if not CREATED_APP_IDS:
        return
    bootstrap = os.environ.get("LOOPWATCH_TEST_KAFKA", "127.0.0.1:19092")
    try:
        asyncio.run(delete_topics(bootstrap, CREATED_APP_IDS))
    except Exception as exc:  # noqa: BLE001 - the tests' outcome stands; the leftovers are named
        print(f"\n(the session's topics on {bootstrap} were not deleted: {exc})")


@pytest.fixture(scope="session")
def kafka_bootstrap() -> str:
    bootstrap = os.environ.get("LOOPWATCH_TEST_KAFKA", "127.0.0.1:19092")
    settings = parse_stream_settings({}, {"kafka_bootstrap": bootstrap, "startup_timeout_s": 20})
    try:
        asyncio.run(wait_for_broker(settings))
    except Exception as exc:  # noqa: BLE001 - reported as a failure with the reason
        pytest.fail(f"no Kafka broker at {bootstrap} (start it with docker/services.sh up): {exc}")
    return bootstrap


@pytest.fixture(scope="session")
def redis_url() -> str:
    url = os.environ.get("LOOPWATCH_TEST_REDIS", "redis://127.0.0.1:16379/0")
    port = url.rsplit(":", 1)[1].split("/")[0]
    done = subprocess.run(["redis-cli", "-p", port, "ping"], capture_output=True, text=True)
    if done.stdout.strip() != "PONG":
        pytest.fail(f"no Redis server at {url} (start it with docker/services.sh up)")
    return url


@pytest.fixture
def names() -> Names:
    return Names()


@pytest.fixture
def workers(tmp_path: Path) -> Iterator[list[WorkerProcess]]:
    """Workers started by a test; all stopped at its end."""
    started: list[WorkerProcess] = []
    yield started
    for worker in started:
        worker.stop()


@pytest.fixture
def gateway_url() -> Iterator[str]:
    """A real ``loopwatch gateway`` process for the test: its URL."""
    with gateway_process() as started:
        yield started.url


@pytest.fixture(scope="session")
def codex() -> Codex:
    """The pinned Codex CLI, installed once (``runtimes/codex.sh``)."""
    from tests.integration.runtimes.codex_cli import Codex

    return Codex.install()


@pytest.fixture(scope="session")
def gemini() -> Gemini:
    """The pinned Gemini CLI and its Node.js, installed once (``runtimes/gemini.sh``)."""
    from tests.integration.runtimes.gemini_cli import Gemini

    return Gemini.install()
