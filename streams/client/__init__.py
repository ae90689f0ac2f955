"""The orchestrator's Python client over Kafka and Redis."""

from loopwatch.streams.client.kafka_client import LoopwatchClient, ProposedCall, RunDecision

__all__ = ["LoopwatchClient", "ProposedCall", "RunDecision"]
