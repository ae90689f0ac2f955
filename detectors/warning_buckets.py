"""Warning de-duplication (spec §7.2 with loopwatch D1).

A warning with count ``n`` under key ``k`` is emitted only when ``n // warningThreshold`` is
higher than the last bucket emitted for ``k`` (OpenClaw uses a constant 10; loopwatch follows
``warningThreshold``, identical at the default). At most 256 keys are kept; the oldest
inserted key is dropped first and re-setting a key does not move it.

Trace (threshold 10): counts 10, 11, ..., 19 under one key → only 10 is emitted; 20 again.
"""

from __future__ import annotations

MAX_WARNING_KEYS = 256


def should_emit(buckets: dict[str, int], key: str, count: int, threshold: int) -> bool:
    """Decide, and remember the bucket when the warning is emitted."""
    bucket = count // threshold
    if bucket <= buckets.get(key, 0):
        return False
    buckets[key] = bucket
    if len(buckets) > MAX_WARNING_KEYS:
        del buckets[next(iter(buckets))]
    return True
