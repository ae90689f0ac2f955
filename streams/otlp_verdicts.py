"""OTLP out: loopwatch's own verdicts and aborts as OpenTelemetry log records.

Off by default. With ``LOOPWATCH_OTLP_ENDPOINT`` set (an OTLP/HTTP base URL such as
``http://collector:4318``, to which ``/v1/logs`` is added, or the full ``…/v1/logs`` URL), the
embedded gateway (:mod:`streams.gateway.otlp_export`) and the Kafka worker hand every verdict
they publish to the real opentelemetry-sdk: a ``LoggerProvider`` with a
``BatchLogRecordProcessor`` and the ``OTLPLogExporter`` of opentelemetry-exporter-otlp-proto-http
(protobuf; its own ``OTEL_EXPORTER_OTLP_*`` variables — headers, timeout, compression,
certificates — apply). Exporting never blocks detection: records are queued and sent by the
SDK's thread; a full queue drops records (the SDK's behaviour).

One log record per verdict: ``event_name`` ``loopwatch.verdict`` (``loopwatch.abort`` for an
abort), body = the verdict's message, severity WARN for a warning and ERROR for a block or an
abort (``severity_text`` the verdict's level), timestamp = the verdict's ``ts`` (else now),
and the attributes ``loopwatch.verdict.level``, ``.action`` (``warn``/``block``/``abort``),
``.detector`` (an abort's reason), ``.count``, ``.run_id``, ``.agent_id``, ``.tool``,
``.message``, ``.id``, ``.trigger_event_id``, ``.tool_call_id``, ``.enforced``, plus
``gen_ai.conversation.id`` = the run id and ``gen_ai.agent.name`` = the agent (absent values
are left out). The resource says ``service.name`` (``loopwatch-gateway``/``loopwatch-worker``
unless ``OTEL_SERVICE_NAME`` says otherwise).

A verdict id already exported by this process is not exported again (the worker re-publishes
unconfirmed verdicts after a redelivery); another process may export it once more: consumers
de-duplicate on ``loopwatch.verdict.id`` as they do on the topic.

Needs the ``otlp`` extra; without it, setting the endpoint is refused at startup with the reason.
"""

from __future__ import annotations

import os
import time
from collections import OrderedDict
from collections.abc import Iterable, Mapping
from typing import Any, Final

import msgspec

from loopwatch.config.errors import LoopwatchError
from loopwatch.detectors.events import Abort, Output, Verdict, shape_of

__all__ = ["ENDPOINT_ENV", "VerdictExporter", "verdict_attributes", "verdict_exporter_from_env"]

#: The OTLP/HTTP endpoint verdicts are exported to (unset: no export).
ENDPOINT_ENV: Final = "LOOPWATCH_OTLP_ENDPOINT"
#: Verdict ids remembered to export each once per process.
_REMEMBERED: Final = 10_000
_DECODER: Final = msgspec.json.Decoder(Verdict | Abort)


def verdict_attributes(output: Output) -> dict[str, str | int | bool]:
    """The log record attributes of a verdict or an abort (None values left out)."""
    level, detector, action = shape_of(output)
    values: dict[str, Any] = {
        "loopwatch.verdict.level": level,
        "loopwatch.verdict.action": action,
        "loopwatch.verdict.detector": detector,
        "loopwatch.verdict.count": output.count,
        "loopwatch.verdict.run_id": output.run_id,
        "loopwatch.verdict.agent_id": output.agent_id,
        "loopwatch.verdict.session_id": output.session_id,
        "loopwatch.verdict.tool": output.tool,
        "loopwatch.verdict.message": output.message,
        "loopwatch.verdict.id": output.verdict_id,
        "loopwatch.verdict.trigger_event_id": output.trigger_event_id,
        "loopwatch.verdict.tool_call_id": output.tool_call_id if isinstance(output, Verdict) else None,
        "loopwatch.verdict.enforced": output.enforced,
        "gen_ai.conversation.id": output.run_id,
        "gen_ai.agent.name": output.agent_id,
    }
    return {key: value for key, value in values.items() if value is not None}


def _logs_url(endpoint: str) -> str:
    """The ``/v1/logs`` URL of an endpoint; :class:`LoopwatchError` for one that is no
    http(s) URL with a host (told at startup, not at the first verdict's export)."""
    from loopwatch.streams.gateway.gateway_post import NOT_HTTP, http_url_problem

    endpoint = endpoint.strip()
    problem = http_url_problem(endpoint)
    if problem == NOT_HTTP:
        raise LoopwatchError(
            f"{ENDPOINT_ENV}={endpoint!r}: an OTLP/HTTP URL with http:// or https:// and a host is "
            "needed, e.g. http://collector:4318 (/v1/logs is added)"
        )
    if problem is not None:
        raise LoopwatchError(f"{ENDPOINT_ENV}={endpoint!r}: {problem}")
    return endpoint if endpoint.rstrip("/").endswith("/v1/logs") else endpoint.rstrip("/") + "/v1/logs"


#: OTLP times are unsigned 64-bit nanoseconds.
_FIXED64 = 1 << 64


class VerdictExporter:
    """Verdicts to an OTLP/HTTP logs endpoint through the opentelemetry-sdk (see the module)."""

    def __init__(self, endpoint: str, service_name: str, schedule_delay_ms: int | None = None) -> None:
        self.url = _logs_url(endpoint)
        try:
            from opentelemetry.exporter.otlp.proto.http._log_exporter import OTLPLogExporter
            from opentelemetry.sdk._logs import LoggerProvider
            from opentelemetry.sdk._logs.export import BatchLogRecordProcessor
            from opentelemetry.sdk.resources import Resource
        except ImportError as exc:
            raise LoopwatchError(
                f"{ENDPOINT_ENV} is set but the otlp extra is missing (pip install 'loopwatch[otlp]'): {exc}"
            ) from exc
        resource = Resource.create({"service.name": os.environ.get("OTEL_SERVICE_NAME") or service_name})
        self._provider = LoggerProvider(resource=resource)
        exporter = OTLPLogExporter(self.url)
        self._provider.add_log_record_processor(BatchLogRecordProcessor(exporter, schedule_delay_ms))
        self._logger = self._provider.get_logger("loopwatch")
        self._seen: OrderedDict[str, None] = OrderedDict()

    def export(self, outputs: Iterable[Output]) -> None:
        """Queue one log record per verdict not exported before (returns at once)."""
        from opentelemetry._logs import SeverityNumber

        for output in outputs:
            if output.verdict_id in self._seen:
                continue
            self._seen[output.verdict_id] = None
            if len(self._seen) > _REMEMBERED:
                self._seen.popitem(last=False)
            level, _, action = shape_of(output)
            severity = SeverityNumber.WARN if action == "warn" else SeverityNumber.ERROR
            ts_ns = (output.ts if output.ts is not None else int(time.time() * 1000)) * 1_000_000
            if not 0 <= ts_ns < _FIXED64:  # a client's clock, before 1970 or beyond 2554: one
                ts_ns = time.time_ns()  # such record would fail the encoding of its whole batch
            self._logger.emit(
                timestamp=ts_ns,
                observed_timestamp=time.time_ns(),
                severity_number=severity,
                severity_text=level,
                body=output.message,
                attributes=verdict_attributes(output),
                event_name="loopwatch.abort" if isinstance(output, Abort) else "loopwatch.verdict",
            )

    def export_encoded(self, value: bytes | None) -> None:
        """A record of the verdicts topic (wire JSON of a verdict or an abort); others ignored."""
        if not value:
            return
        try:
            output = _DECODER.decode(value)
        except msgspec.DecodeError:
            return
        self.export([output])

    def flush(self, timeout_ms: int = 10_000) -> bool:
        return bool(self._provider.force_flush(timeout_ms))

    def shutdown(self) -> None:
        """Send what is queued, then stop the SDK's thread."""
        self._provider.shutdown()


def verdict_exporter_from_env(
    service_name: str, env: Mapping[str, str] | None = None
) -> VerdictExporter | None:
    """The exporter :data:`ENDPOINT_ENV` asks for, or None (export off, the default)."""
    endpoint = (os.environ if env is None else env).get(ENDPOINT_ENV, "").strip()
    if not endpoint:
        return None
    return VerdictExporter(endpoint, service_name)
