"""Redis decision cache: the latest decision of every active run, for a GET before each cycle.

Layout: hash ``loopwatch:run:<scope>`` with the fields of the latest verdict or abort
(``action`` is ``warn``, ``block`` or ``abort``; an abort is never overwritten by a later
verdict), expiring ``redis_ttl_s`` after the last update, plus a JSON notice on the pub/sub
channel ``loopwatch:verdicts``. ``run_end`` deletes the hash.

Redis being down never stops detection: failed writes are kept (latest per run, bounded)
and written when Redis answers again.
"""

from __future__ import annotations

import time
from typing import Any

import msgspec
import redis.asyncio as aioredis
import structlog
from redis.exceptions import RedisError

from loopwatch.detectors.events import Abort, Output, Verdict

__all__ = ["DecisionCache", "decision_fields", "run_key"]

_log = structlog.get_logger("loopwatch.redis")
CHANNEL = "loopwatch:verdicts"
_STICKY_SET = """
if redis.call('HGET', KEYS[1], 'action') == 'abort' and ARGV[2] ~= 'abort' then
  redis.call('EXPIRE', KEYS[1], ARGV[1])
  return 0
end
redis.call('DEL', KEYS[1])
for i = 3, #ARGV, 2 do redis.call('HSET', KEYS[1], ARGV[i], ARGV[i + 1]) end
redis.call('EXPIRE', KEYS[1], ARGV[1])
return 1
"""


def run_key(scope: str) -> str:
    return f"loopwatch:run:{scope}"


def decision_fields(output: Output) -> dict[str, str]:
    """The hash fields of one output (strings; absent values omitted)."""
    if isinstance(output, Verdict):
        fields: dict[str, Any] = {
            "action": output.action,
            "level": output.level,
            "detector": output.detector,
            "count": output.count,
            "warning_key": output.warning_key,
            "tool_call_id": output.tool_call_id,
        }
    else:
        assert isinstance(output, Abort)
        fields = {
            "action": output.action,
            "level": output.level,
            "detector": output.detector,
            "count": output.count,
        }
    fields.update(
        message=output.message,
        verdict_id=output.verdict_id,
        trigger_event_id=output.trigger_event_id,
        tool=output.tool,
        agent_id=output.agent_id,
        run_id=output.run_id,
        session_id=output.session_id,
        ts=output.ts,
        enforced="true" if output.enforced else "false",
    )
    return {key: str(value) for key, value in fields.items() if value is not None}


class DecisionCache:
    """Writes decisions to Redis; rewrites them all when Redis comes back (it may have lost them).

    The latest decision of every run with a verdict is also kept here (bounded by
    ``keep_limit``), which is what a returning Redis is re-filled from.
    """

    def __init__(
        self,
        url: str,
        password: str | None = None,
        ttl_s: int = 3600,
        keep_limit: int = 100_000,
        retry_s: float = 1.0,
    ) -> None:
        self._client = aioredis.Redis.from_url(
            url, password=password, socket_timeout=1.0, socket_connect_timeout=1.0
        )
        self._set = self._client.register_script(_STICKY_SET)
        self._ttl = ttl_s
        self._latest: dict[str, dict[str, str]] = {}
        self._deleted: set[str] = set()
        self._keep_limit = keep_limit
        self._retry_s = retry_s
        self._down_since: float | None = None
        self._next_try = 0.0
        self.writes = 0
        self.failures = 0
        self.dropped = 0

    @property
    def available(self) -> bool:
        return self._down_since is None

    async def record(self, scope: str, output: Output) -> None:
        """Store the run's latest decision and publish a notice."""
        fields = decision_fields(output)
        previous = self._latest.get(scope)
        if previous is not None and previous.get("action") == "abort" and fields["action"] != "abort":
            fields = previous  # an abort stays the decision
        elif previous is None and len(self._latest) >= self._keep_limit:
            self.dropped += 1
        else:
            self._latest[scope] = fields
        self._deleted.discard(scope)
        if self._down_since is None:  # never wait for a dead Redis on the event path
            try:
                await self._send(scope, fields)
            except (RedisError, OSError) as exc:
                self._went_down(exc)

    async def forget(self, scope: str) -> None:
        """The run ended: delete its decision."""
        self._latest.pop(scope, None)
        if self._down_since is None:
            try:
                await self._client.delete(run_key(scope))
                return
            except (RedisError, OSError) as exc:
                self._went_down(exc)
        self._deleted.add(scope)

    async def _send(self, scope: str, fields: dict[str, str], notify: bool = True) -> None:
        args: list[str | int] = [self._ttl, fields["action"]]
        for name, value in fields.items():
            args.extend((name, value))
        await self._set(keys=[run_key(scope)], args=args)
        if notify:
            await self._client.publish(CHANNEL, msgspec.json.encode({"scope": scope, **fields}))
        self.writes += 1

    def _went_down(self, exc: BaseException) -> None:
        self.failures += 1
        if self._down_since is None:
            self._down_since = time.monotonic()
            _log.warning("redis unavailable; decisions are kept until it returns", error=str(exc))
        self._next_try = time.monotonic() + self._retry_s

    async def _resync(self) -> bool:
        try:
            await self._client.ping()
            for scope in list(self._deleted):
                await self._client.delete(run_key(scope))
                self._deleted.discard(scope)
            for scope, fields in list(self._latest.items()):
                await self._send(scope, fields, notify=False)
        except (RedisError, OSError) as exc:
            self._went_down(exc)
            return False
        down_for = time.monotonic() - (self._down_since or time.monotonic())
        self._down_since = None
        _log.info("redis is back; decisions rewritten", runs=len(self._latest), down_for_s=round(down_for, 1))
        return True

    async def tick(self) -> None:
        """Retry after an outage (called every second by the worker)."""
        if self._down_since is not None and time.monotonic() >= self._next_try:
            await self._resync()

    async def close(self) -> None:
        await self._client.aclose()
