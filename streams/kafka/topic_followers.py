"""What every worker follows besides its input, each with its own consumer (no group):

* :func:`follow_fleet` — every event and verdict of the fleet, for the fleet view (/fleet),
  but the events of the worker's own partitions, which it shows the view as it applies them;
* :func:`follow_alerts` — every fleet alert from the start of the alerts topic: open
  outages (F1's fail-fast blocks on this worker's runs), systemic loops, delegation chains
  (F6's chain blocks), for the dashboard and the metrics;
* :func:`follow_config` — config overrides published after startup, for as long as the
  worker runs.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from typing import Any, Final

import msgspec
import structlog
from aiokafka import AIOKafkaConsumer, TopicPartition

from loopwatch.config.stream_settings import StreamSettings
from loopwatch.detectors.decoding import decode_event
from loopwatch.detectors.events import Abort, Event, InvalidEvent, Output, Verdict
from loopwatch.detectors.fleet.alerts import decode_alert
from loopwatch.detectors.fleet.chain_blocks import ChainBlocks
from loopwatch.streams.fleet_view.alert_board import AlertBoard
from loopwatch.streams.fleet_view.view import FleetView
from loopwatch.streams.kafka.batch_records import decode_batch
from loopwatch.streams.kafka.connect import aiokafka_auth
from loopwatch.streams.kafka.view_handoff import PAUSE, ViewHandoff

__all__ = ["follow_alerts", "follow_config", "follow_fleet", "show_event", "show_output"]

#: The fleet view's follower fetches in bulk (see :func:`follow_fleet`) and shows the view
#: at most FLEET_YIELD_EVERY records at a time between two turns of the detection loop.
FLEET_FETCH_MIN_BYTES: Final = 256 * 1024
FLEET_FETCH_WAIT_MS: Final = 250
FLEET_YIELD_EVERY: Final = 100

_log = structlog.get_logger("loopwatch.worker")
_OUTPUTS: Any = msgspec.json.Decoder(Verdict | Abort)


def _consumer(settings: StreamSettings, **options: Any) -> AIOKafkaConsumer:
    return AIOKafkaConsumer(
        bootstrap_servers=settings.kafka_bootstrap,
        enable_auto_commit=False,
        **options,
        **aiokafka_auth(settings),
    )


async def follow_fleet(
    settings: StreamSettings,
    view: FleetView,
    max_bytes: Callable[[], int],
    handoff: ViewHandoff | None = None,
) -> None:
    """Every event and verdict of the fleet (all partitions), from the view's horizon on.

    ``handoff``: the input records the worker shows the view itself (its own partitions,
    :mod:`streams.kafka.view_handoff`) are not read here. Fetches wait up to
    FLEET_FETCH_WAIT_MS for FLEET_FETCH_MIN_BYTES: a dashboard a quarter of a second behind
    costs far fewer fetch round trips than one that chases every record.
    """
    consumer = _consumer(
        settings, fetch_min_bytes=FLEET_FETCH_MIN_BYTES, fetch_max_wait_ms=FLEET_FETCH_WAIT_MS
    )
    await consumer.start()
    events = settings.topic_events

    def pause(partition: int, at: int) -> None:  # the worker shows the records from ``at`` on
        tp = TopicPartition(events, partition)
        consumer.seek(tp, at)
        consumer.pause(tp)

    def resume(partition: int) -> None:  # released by the worker (paused or not)
        consumer.resume(TopicPartition(events, partition))

    try:
        topics = (events, settings.topic_verdicts)
        partitions = [TopicPartition(t, p) for t in topics for p in range(settings.partitions)]
        consumer.assign(partitions)
        since = int(time.time() * 1000) - view.horizon_ms
        ends = await consumer.end_offsets(partitions)  # before the time lookup: no gap
        starts = await consumer.offsets_for_times(dict.fromkeys(partitions, since))
        for tp in partitions:
            found = starts.get(tp)
            offset = ends[tp] if found is None else found.offset
            consumer.seek(tp, offset)
            if handoff is not None and tp.topic == events:
                handoff.positioned(tp.partition, offset)
        if handoff is not None:
            handoff.on_release = resume
        while True:
            batch = await consumer.getmany(timeout_ms=1000, max_records=FLEET_YIELD_EVERY)
            for tp, messages in batch.items():
                is_verdict = tp.topic != events
                for message in messages:
                    if handoff is not None and not is_verdict:
                        goes_on = handoff.follower_skips(tp.partition, message.offset)
                        if goes_on is not None:
                            if goes_on == PAUSE:
                                pause(tp.partition, message.offset)
                            else:
                                consumer.seek(tp, goes_on)
                            break
                    _observe(view, is_verdict, message.value, message.timestamp, max_bytes())
            await asyncio.sleep(0)  # detection never waits for more than a chunk of the view
    finally:
        await consumer.stop()


def _observe(view: FleetView, is_verdict: bool, value: bytes | None, ts_ms: int, max_bytes: int) -> None:
    if not is_verdict and value and value[:1] == b"[":  # one model turn's calls (batch_records)
        try:
            calls = decode_batch(value, max_bytes, texts=True)
        except (InvalidEvent, RecursionError):
            return
        except Exception as exc:  # noqa: BLE001 - a bug of the decoding: logged, the view goes on
            _skipped(exc)
            return
        for call in calls:
            show_event(view, call, ts_ms)
        return
    if not value or len(value) > max_bytes:
        return  # refused by the workers too
    try:
        if is_verdict:
            output = _OUTPUTS.decode(value)
        else:
            event = decode_event(value, texts=True)  # (the view reads params as text too)
    except (InvalidEvent, msgspec.DecodeError, msgspec.ValidationError, RecursionError):
        return  # invalid input is counted by the metrics and kept in the dead-letter topic
    except Exception as exc:  # noqa: BLE001 - a bug of the decoding: logged, the view goes on
        _skipped(exc)
        return
    if is_verdict:
        show_output(view, output, ts_ms)
    else:
        show_event(view, event, ts_ms)


def show_event(view: FleetView, event: Event, ts_ms: int) -> None:
    """``view.event``, whose failure (a bug of the view) is logged: it never stops detection."""
    try:
        view.event(event, ts_ms)
    except Exception as exc:  # noqa: BLE001 - the view is monitoring, detection goes on
        _skipped(exc)


def show_output(view: FleetView, output: Output, ts_ms: int) -> None:
    try:
        view.output(output, ts_ms)
    except Exception as exc:  # noqa: BLE001 - as in show_event
        _skipped(exc)


def _skipped(exc: Exception) -> None:
    # (raised in a follower, it would crash the worker, which would seek back to the record
    # after the restart and crash again)
    _log.error("fleet view skipped a record it could not take", error=f"{type(exc).__name__}: {exc}")


async def follow_alerts(
    settings: StreamSettings, board: AlertBoard, chains: ChainBlocks | None = None
) -> None:
    """Every fleet alert from the start of the alerts topic, into ``board`` (and ``chains``)."""
    consumer = _consumer(settings, auto_offset_reset="earliest")
    await consumer.start()
    try:
        partitions = [TopicPartition(settings.topic_alerts, p) for p in range(settings.partitions)]
        consumer.assign(partitions)
        await consumer.seek_to_beginning(*partitions)
        while True:
            batch = await consumer.getmany(timeout_ms=1000)
            for messages in batch.values():
                for message in messages:
                    try:
                        alert = decode_alert(message.value or b"")
                        board.add(alert)
                        if chains is not None:
                            chains.add(alert)
                    except Exception as exc:  # noqa: BLE001 - one bad record is skipped, never fatal
                        _log.warning(
                            "unreadable fleet alert ignored",
                            partition=message.partition,
                            offset=message.offset,
                            error=f"{type(exc).__name__}: {exc}",
                        )
    finally:
        await consumer.stop()


async def follow_config(
    settings: StreamSettings, offset: int, apply: Callable[[bytes | None, bytes | None], None]
) -> None:
    """Config overrides from ``offset`` of the config topic on, each handed to ``apply``."""
    consumer = _consumer(settings)
    await consumer.start()
    try:
        tp = TopicPartition(settings.topic_config, 0)
        consumer.assign([tp])
        consumer.seek(tp, offset)
        while True:
            batch = await consumer.getmany(tp, timeout_ms=1000)
            for message in batch.get(tp, []):
                apply(message.key, message.value)
    finally:
        await consumer.stop()
