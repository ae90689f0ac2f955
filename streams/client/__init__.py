"""The orchestrator's Python client over Kafka and Redis."""

from loopwatch.streams.client.kafka_client import LoopwatchClient, RunDecision

__all__ = ["LoopwatchClient", "RunDecision"]
