"""The orchestrator's Python client over Kafka and Redis."""

from loopwatch.streams.client.kafka_client import (
    BrokerUnreachable,
    LoopwatchClient,
    ProposedCall,
    RunDecision,
)

__all__ = ["BrokerUnreachable", "LoopwatchClient", "ProposedCall", "RunDecision"]
