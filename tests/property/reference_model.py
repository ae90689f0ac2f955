"""A literal, rescanning model of spec §4–§5 (no indexes), to check the incremental core."""

from __future__ import annotations

from dataclasses import dataclass

from config.loop_detection import ResolvedLoopDetection


@dataclass
class Rec:
    tool: str
    args_hash: str
    call_id: str | None
    result_hash: str | None = None
    unknown: str | None = None


class ReferenceHistory:
    def __init__(self, limit: int) -> None:
        self.limit = limit
        self.records: list[Rec] = []

    def record_call(self, tool: str, args_hash: str, call_id: str | None) -> None:
        self.records.append(Rec(tool, args_hash, call_id))
        del self.records[: max(0, len(self.records) - self.limit)]

    def record_outcome(
        self, tool: str, args_hash: str, call_id: str | None, result_hash: str | None, unknown: str | None
    ) -> None:
        if result_hash is None:
            return
        for rec in reversed(self.records):
            if (call_id and rec.call_id != call_id) or rec.tool != tool or rec.args_hash != args_hash:
                continue
            if rec.result_hash is None:
                rec.result_hash, rec.unknown = result_hash, unknown
                return
        self.records.append(Rec(tool, args_hash, call_id, result_hash, unknown))
        del self.records[: max(0, len(self.records) - self.limit)]


def reference_detect(  # noqa: C901 - kept literal on purpose: one piece, like the spec's table
    records: list[Rec], tool: str, h: str, known_poll: bool, cfg: ResolvedLoopDetection
) -> tuple[str, str, int] | None:
    if not cfg.enabled:
        return None
    # unknown-tool streak
    streak, name = 0, None
    for rec in reversed(records):
        if rec.tool != tool or rec.unknown is None:
            break
        if name is None:
            name = rec.unknown
        elif rec.unknown != name:
            break
        streak += 1
    # no-progress streak
    no_progress, latest = 0, None
    for rec in reversed(records):
        if rec.tool != tool or rec.args_hash != h or rec.result_hash is None:
            continue
        if latest is None:
            latest = rec.result_hash
        if rec.result_hash != latest:
            break
        no_progress += 1
    recent = sum(1 for rec in records if rec.tool == tool and rec.args_hash == h)
    # ping-pong
    pp_count, evidence = 0, False
    if records:
        last = records[-1]
        other = next((r.args_hash for r in reversed(records[:-1]) if r.args_hash != last.args_hash), None)
        if other is not None:
            tail = 0
            for i, rec in enumerate(reversed(records)):
                want = last.args_hash if i % 2 == 0 else other
                if rec.args_hash != want:
                    break
                tail += 1
            if tail >= 2 and h == other:
                pp_count = tail + 1
                tail_recs = records[-tail:]
                a = {r.result_hash for r in tail_recs if r.args_hash == last.args_hash}
                b = {r.result_hash for r in tail_recs if r.args_hash == other}
                evidence = all(r.result_hash is not None for r in tail_recs) and len(a) == 1 and len(b) == 1
    if streak >= cfg.unknown_tool_threshold:
        return ("critical", "unknown_tool_repeat", streak)
    if no_progress >= cfg.global_circuit_breaker_threshold:
        return ("critical", "global_circuit_breaker", no_progress)
    if known_poll and cfg.known_poll_no_progress and no_progress >= cfg.critical_threshold:
        return ("critical", "known_poll_no_progress", no_progress)
    if known_poll and cfg.known_poll_no_progress and no_progress >= cfg.warning_threshold:
        return ("warning", "known_poll_no_progress", no_progress)
    if cfg.ping_pong and pp_count >= cfg.critical_threshold and evidence:
        return ("critical", "ping_pong", pp_count)
    if cfg.ping_pong and pp_count >= cfg.warning_threshold:
        return ("warning", "ping_pong", pp_count)
    if not known_poll and cfg.generic_repeat and no_progress >= cfg.critical_threshold:
        return ("critical", "generic_repeat", no_progress)
    if not known_poll and cfg.generic_repeat and recent >= cfg.warning_threshold:
        return ("warning", "generic_repeat", recent)
    return None
