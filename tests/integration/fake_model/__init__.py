"""A scripted model server on 127.0.0.1 for running real agent CLIs offline.

``FakeModel(script)`` serves the Anthropic Messages API (``anthropic.py``); the scripts and the
recorder (``script.py``) do not depend on the wire API, so other APIs can be served beside it.
"""

from tests.integration.fake_model.script import (
    Conversation,
    Exchange,
    Recorder,
    RepeatTool,
    Reply,
    Router,
    Script,
    Steps,
    StopWhen,
    ToolCall,
    ToolOutcome,
    When,
    refused_with,
)
from tests.integration.fake_model.server import FakeModel

__all__ = [
    "Conversation",
    "Exchange",
    "FakeModel",
    "Recorder",
    "RepeatTool",
    "Reply",
    "Router",
    "Script",
    "Steps",
    "StopWhen",
    "ToolCall",
    "ToolOutcome",
    "When",
    "refused_with",
]
