"""A literal, rescanning model of spec §4–§5 (no indexes), to check the incremental core.

``newest=True`` models revision 2026-08 (docs/rules-2026-08.md) the same literal way: veto
records, veto anchoring, the exec terminal tail, argument churn and its liveness signal.
"""

from __future__ import annotations

from dataclasses import dataclass

from loopwatch.config.loop_detection import ResolvedLoopDetection


@dataclass
class Rec:
    tool: str
    args_hash: str
    call_id: str | None
    result_hash: str | None = None
    unknown: str | None = None
    kind: str | None = None
    no_progress: bool = False
    failure_id: str | None = None

    @property
    def veto(self) -> bool:
        return self.result_hash is None and self.kind is not None


# (result_hash, unknown, kind, no_progress, failure_id), as hash_outcome gives it
Outcome = tuple[str | None, str | None, str | None, bool, str | None]


class ReferenceHistory:
    def __init__(self, limit: int) -> None:
        self.limit = limit
        self.records: list[Rec] = []

    def record_call(self, tool: str, args_hash: str, call_id: str | None) -> None:
        self.records.append(Rec(tool, args_hash, call_id))
        del self.records[: max(0, len(self.records) - self.limit)]

    def record_outcome(self, tool: str, args_hash: str, call_id: str | None, outcome: Outcome) -> None:
        result_hash, unknown, kind, no_progress, failure_id = outcome
        if result_hash is None and kind is None:
            return
        for rec in reversed(self.records):
            if (call_id and rec.call_id != call_id) or rec.tool != tool or rec.args_hash != args_hash:
                continue
            if rec.result_hash is None and rec.kind is None:
                rec.result_hash, rec.unknown, rec.kind = result_hash, unknown, kind
                rec.no_progress, rec.failure_id = no_progress, failure_id
                return
        self.records.append(
            Rec(tool, args_hash, call_id, result_hash, unknown, kind, no_progress, failure_id)
        )
        del self.records[: max(0, len(self.records) - self.limit)]


def _exact_streak(records: list[Rec], h: str) -> tuple[int, str | None]:
    pending, count, latest = 0, 0, None
    for rec in reversed(records):
        if rec.args_hash != h:
            continue
        if rec.veto:
            pending += 1
            continue
        if rec.result_hash is None:
            continue
        if latest is None:
            latest = rec.result_hash
            count = pending + 1
        elif rec.result_hash == latest:
            count += pending + 1
        else:
            break
        pending = 0
    return (count, latest) if latest is not None else (pending, None)


def _exec_tail(records: list[Rec], h: str) -> tuple[int, str | None]:
    pending, count, latest, crossed = 0, 0, None, False
    for rec in reversed(records):
        if rec.tool != "exec":
            break
        if rec.veto:
            pending += 1
            continue
        if rec.result_hash is None:
            continue
        if rec.kind != "terminal-exec-failure":
            break
        if latest is None:
            latest, count, pending = rec, pending + 1, 0
            crossed = rec.args_hash != h
            continue
        if crossed and rec.args_hash == h:
            break
        if rec.args_hash != h:
            crossed = True
        if rec.result_hash == latest.result_hash or rec.failure_id == latest.failure_id:
            count, pending = count + pending + 1, 0
        else:
            break
    return (count, latest.result_hash) if latest is not None else (0, None)


def _churn(records: list[Rec], tool: str, h: str) -> int:
    variants: dict[str, list[object]] = {}
    total = 0
    for rec in reversed(records):
        if rec.tool != tool:
            break
        if rec.result_hash is None:
            continue
        if not rec.no_progress:
            break
        seen = variants.setdefault(rec.args_hash, [rec.result_hash, 0])
        if seen[0] != rec.result_hash:
            break
        seen[1] = int(str(seen[1])) + 1
        total += 1
    stable = {a: v for a, v in variants.items() if int(str(v[1])) >= 3}
    ok = (
        len(stable) >= 2
        and sum(int(str(v[1])) for v in stable.values()) == total
        and len({v[0] for v in stable.values()}) == 1
        and h in stable
    )
    return total if ok else 0


def reference_detect(  # noqa: C901 - kept literal on purpose: one piece, like the spec's table
    records: list[Rec], tool: str, h: str, known_poll: bool, cfg: ResolvedLoopDetection
) -> tuple[str, str, int, str | None] | None:
    """``(level, detector, count, liveness_signal)`` of the first matching rule."""
    if not cfg.enabled:
        return None
    newest = cfg.revision == "2026-08"
    # unknown-tool streak (2026-08: veto records of any tool are passed over)
    streak, name = 0, None
    for rec in reversed(records):
        if newest and rec.veto:
            continue
        if rec.tool != tool or rec.unknown is None:
            break
        if name is None:
            name = rec.unknown
        elif rec.unknown != name:
            break
        streak += 1
    # no-progress streak
    if newest:
        no_progress, _ = _exact_streak(records, h)
        if tool == "exec":
            no_progress = max(no_progress, _exec_tail(records, h)[0])
    else:
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
    churn = _churn(records, tool, h) if newest else 0
    liveness = "argument_churn" if churn >= cfg.warning_threshold else None
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
        return ("critical", "unknown_tool_repeat", streak, None)
    if no_progress >= cfg.global_circuit_breaker_threshold:
        return ("critical", "global_circuit_breaker", no_progress, None)
    if known_poll and cfg.known_poll_no_progress and no_progress >= cfg.critical_threshold:
        return ("critical", "known_poll_no_progress", no_progress, None)
    if known_poll and cfg.known_poll_no_progress and no_progress >= cfg.warning_threshold:
        return ("warning", "known_poll_no_progress", no_progress, liveness)
    if cfg.ping_pong and pp_count >= cfg.critical_threshold and evidence:
        return ("critical", "ping_pong", pp_count, None)
    if cfg.ping_pong and pp_count >= cfg.warning_threshold:
        return ("warning", "ping_pong", pp_count, liveness)
    if not known_poll and cfg.generic_repeat and no_progress >= cfg.critical_threshold:
        return ("critical", "generic_repeat", no_progress, None)
    if newest and churn >= cfg.warning_threshold:
        return ("warning", "argument_churn", churn, "argument_churn")
    if not known_poll and cfg.generic_repeat and recent >= cfg.warning_threshold:
        return ("warning", "generic_repeat", recent, None)
    return None
