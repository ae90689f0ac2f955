"""A complete (scripted) agent loop that uses loopwatch through Kafka. Shown in docs/client.md.

The "model" keeps reading a file that does not exist. Before each tool cycle the loop asks
loopwatch for the run's decision; after publishing the call it waits briefly for the call's
own verdict. It prints the warning it would give the model, skips blocked calls, and stops
when the run is aborted.
"""

from __future__ import annotations

import asyncio
import sys

from loopwatch.streams.client.kafka_client import LoopwatchClient


async def agent_loop(client: LoopwatchClient, run_id: str, max_cycles: int = 40) -> list[str]:
    """Run the scripted agent; returns what loopwatch said, cycle by cycle."""
    said: list[str] = []
    for cycle in range(max_cycles):
        decision = await client.decision(run_id)  # may the next tool cycle proceed?
        if decision.action == "abort":
            said.append("abort")
            break
        params = {"path": "/workspace/PLAN.md"}  # the model insists on the same call
        call_id = f"call-{cycle}"
        event_id = await client.tool_call(run_id, "read", params, tool_call_id=call_id)
        verdict = await client.gate(event_id, timeout=0.5)  # this call's own verdict, if any
        if verdict.action != "allow":
            said.append(verdict.action)
            print(f"[{run_id}] loopwatch {verdict.action}: {verdict.message}")
        if verdict.action == "abort":
            break
        if verdict.action == "block":
            continue  # not executed: the model gets the block message instead of a result
        # ... execute the tool here; this one always fails the same way:
        await client.tool_result(
            run_id, "read", params, error="ENOENT: no such file or directory", tool_call_id=call_id
        )
    await client.run_end(run_id)
    return said


async def main(run_id: str) -> None:
    async with LoopwatchClient.from_env(agent_id="example") as client:
        said = await agent_loop(client, run_id)
    print("loopwatch said:", ", ".join(said) or "nothing")


if __name__ == "__main__":
    import argparse

    from loopwatch.config.errors import LoopwatchError

    parser = argparse.ArgumentParser(
        prog="python -m loopwatch.streams.client.example_agent",
        description="A scripted agent that loops on purpose, on the Kafka workers (LOOPWATCH_* "
        "settings from the environment): it prints what loopwatch said (warn, block, abort).",
    )
    parser.add_argument("run_id", nargs="?", default="example-run", help="the run id (default example-run)")
    try:
        asyncio.run(main(parser.parse_args().run_id))
    except LoopwatchError as exc:
        print(f"loopwatch: {exc}", file=sys.stderr)
        sys.exit(2)
