"""The four benchmark workloads (healthy, looping, large, long), regenerated bit for bit.

The generator follows the project's benchmark specification: an xorshift32 PRNG (13/17/5,
16 outputs discarded after seeding), a 32-word vocabulary, four tools with ordered parameter
keys, and loop runs that repeat one call 40 times. :data:`EXPECTED_SHA256` holds the
published digests of the files, checked after generation.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

WORDS = [
    "alpha",
    "beta",
    "gamma",
    "delta",
    "error",
    "warning",
    "info",
    "debug",
    "file",
    "line",
    "value",
    "return",
    "import",
    "class",
    "def",
    "self",
    "None",
    "True",
    "False",
    "test",
    "assert",
    "result",
    "config",
    "module",
    "function",
    "string",
    "number",
    "list",
    "dict",
    "path",
    "data",
    "index",
]
VERBS = ["cat", "wc -l", "git diff", "python -m pytest", "grep -n TODO", "ls -la", "head -n 40", "python"]
TOOLS = ["read", "exec", "write", "web_search"]


@dataclass(frozen=True)
class Workload:
    name: str
    seed: int
    runs: int
    calls: int
    large: bool = False
    loop_pct: int = 0
    loop_len: int = 40


WORKLOADS = {
    w.name: w
    for w in (
        Workload("healthy", 11, 1000, 50),
        Workload("looping", 12, 1000, 50, loop_pct=30),
        Workload("large", 13, 100, 50, large=True),
        Workload("long", 14, 50, 1000),
    )
}
EXPECTED_SHA256 = {
    "healthy": "a2051dc350de1a982319519af1d5bd0a1a0f47903ecce2d86fd44172515d693b",
    "looping": "933126d871a28efa075658829eb69eedd46655541bb12d5ff544898b1d3f4185",
    "large": "548de2b643ecd340f7103aebb0d7ae28feb5862d70dca6cfe00f4d4779854f8e",
    "long": "68eb9fb53eddf7369b31bc171ecb1233dfec8e50de69f0696052374f89bbadf1",
}


class XorShift32:
    def __init__(self, seed: int) -> None:
        self.s = seed & 0xFFFFFFFF
        for _ in range(16):
            self.next()

    def next(self) -> int:
        s = self.s
        s ^= (s << 13) & 0xFFFFFFFF
        s ^= s >> 17
        s ^= (s << 5) & 0xFFFFFFFF
        self.s = s
        return s

    def randint(self, n: int) -> int:
        return self.next() % n

    def text(self, n: int) -> str:
        words: list[str] = []
        length = -1
        while length < n:
            word = WORDS[self.randint(32)]
            words.append(word)
            length += len(word) + 1
        return " ".join(words)[:n]


def _path(rng: XorShift32) -> str:
    return f"/repo/src/file_{rng.randint(500)}.py"


def gen_call(rng: XorShift32, large: bool) -> tuple[str, dict[str, Any], dict[str, Any]]:
    tool = TOOLS[rng.randint(4)]
    k = 2 + rng.randint(3)
    params: dict[str, Any] = {}
    bulk = {"read": "path", "exec": "command", "write": "content", "web_search": "query"}[tool]
    keys = {
        "read": ["path", "offset", "limit", "encoding"],
        "exec": ["command", "workdir", "timeout", "yieldMs"],
        "write": ["path", "content", "encoding", "createDirs"],
        "web_search": ["query", "count", "freshness", "country"],
    }[tool][:k]
    for key in keys:
        if large and key == bulk:
            params[key] = rng.text(4096)
            continue
        params[key] = _draw(tool, key, rng)
    text = rng.text(16384) if large else rng.text(150 + rng.randint(101))
    details: dict[str, Any]
    if tool == "read":
        details = {"truncated": False, "totalLines": 1 + rng.randint(400)}
    elif tool == "exec":
        exit_code = 1 if rng.randint(10) == 0 else 0
        details = {"status": "completed", "exitCode": exit_code, "durationMs": rng.randint(5000)}
    elif tool == "write":
        details = {"bytesWritten": rng.randint(10000)}
    else:
        details = {"provider": "brave", "resultCount": rng.randint(11), "tookMs": rng.randint(2000)}
    return tool, params, {"content": [{"type": "text", "text": text}], "details": details}


def _draw(tool: str, key: str, rng: XorShift32) -> Any:  # noqa: C901 - one table of generators
    if key == "path":
        return _path(rng)
    if key == "offset":
        return rng.randint(2000)
    if key == "limit":
        return 50 + rng.randint(451)
    if key == "encoding":
        return "utf-8"
    if key == "command":
        verb = VERBS[rng.randint(8)]
        return f"{verb} /repo/src/file_{rng.randint(500)}.py"
    if key == "workdir":
        return "/repo"
    if key == "timeout":
        return 10 + rng.randint(291)
    if key == "yieldMs":
        return 1000 * (1 + rng.randint(10))
    if key == "content":
        return rng.text(40 + rng.randint(161))
    if key == "createDirs":
        return rng.randint(2) == 1
    if key == "query":
        return rng.text(10 + rng.randint(51))
    if key == "count":
        return 1 + rng.randint(10)
    if key == "freshness":
        return ["day", "week", "month", "year"][rng.randint(4)]
    if key == "country":
        return ["US", "DE", "FR", "JP", "GB"][rng.randint(5)]
    raise AssertionError((tool, key))


def generate(workload: Workload) -> bytes:
    """The workload file's bytes, in the generator's own line format."""
    rng = XorShift32(workload.seed)
    out: list[str] = []
    dumps = json.JSONEncoder(separators=(",", ":")).encode
    for r in range(workload.runs):
        loop_start = -1
        loop_call = None
        if workload.loop_pct > 0 and rng.randint(100) < workload.loop_pct:
            loop_start = rng.randint(workload.calls - workload.loop_len + 1)
            loop_call = gen_call(rng, workload.large)
        for i in range(workload.calls):
            if loop_call is not None and loop_start <= i < loop_start + workload.loop_len:
                tool, params, result = loop_call
            else:
                tool, params, result = gen_call(rng, workload.large)
            run_id, call_id = f"run-{r:04d}", f"call-{r:04d}-{i:04d}"
            out.append(
                dumps(
                    {
                        "type": "tool_call",
                        "run_id": run_id,
                        "tool_call_id": call_id,
                        "tool": tool,
                        "params": params,
                        "result": None,
                    }
                )
            )
            out.append(
                dumps(
                    {
                        "type": "tool_result",
                        "run_id": run_id,
                        "tool_call_id": call_id,
                        "tool": tool,
                        "params": None,
                        "result": result,
                    }
                )
            )
    return ("\n".join(out) + "\n").encode()


def ensure(directory: Path, name: str) -> Path:
    """The workload file under ``directory``, generated (and checked) when missing."""
    path = directory / f"{name}.jsonl"
    if path.exists() and hashlib.sha256(path.read_bytes()).hexdigest() == EXPECTED_SHA256[name]:
        return path
    data = generate(WORKLOADS[name])
    digest = hashlib.sha256(data).hexdigest()
    if digest != EXPECTED_SHA256[name]:
        raise SystemExit(f"workload {name}: sha256 {digest} differs from the specification")
    directory.mkdir(parents=True, exist_ok=True)
    path.write_bytes(data)
    manifest = directory / "manifest.json"
    entries = json.loads(manifest.read_text()) if manifest.exists() else {}
    entries[name] = {"sha256": digest, "bytes": len(data), "lines": data.count(b"\n")}
    manifest.write_text(json.dumps(entries, indent=1, sort_keys=True))
    return path


def to_wire(data: bytes) -> list[bytes]:
    """Generator lines as loopwatch wire events: event ids, results carrying their call's params."""
    out: list[bytes] = []
    params = b"null"
    for n, line in enumerate(data.splitlines()):
        if line.startswith(b'{"type":"tool_call"'):
            start = line.index(b',"params":') + len(b',"params":')
            end = line.rindex(b',"result":null}')
            params = line[start:end]
            wire = line[:end] + b"}"
        else:
            wire = line.replace(b'"params":null', b'"params":' + params, 1)
        out.append(wire[:-1] + b',"event_id":"e' + str(n).encode() + b'"}')
    return out
