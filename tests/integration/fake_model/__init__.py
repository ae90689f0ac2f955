"""A scripted model server on 127.0.0.1 for running real agent CLIs offline.

``FakeModel(script, *apis)`` (``server.py``) serves wire APIs: the Anthropic Messages API
(``anthropic.py``, the default), the OpenAI Responses API (``openai_responses.py``) or the Gemini
API (``gemini.py``), on what they share (``wire.py``). The scripts and the recorder
(``script.py``) do not depend on the wire API; every name of ``script.py`` is exported here too.
"""

from tests.integration.fake_model.anthropic import AnthropicApi as AnthropicApi
from tests.integration.fake_model.gemini import GeminiApi as GeminiApi
from tests.integration.fake_model.openai_responses import ResponsesApi as ResponsesApi
from tests.integration.fake_model.script import Conversation as Conversation
from tests.integration.fake_model.script import Exchange as Exchange
from tests.integration.fake_model.script import Recorder as Recorder
from tests.integration.fake_model.script import RepeatTool as RepeatTool
from tests.integration.fake_model.script import Reply as Reply
from tests.integration.fake_model.script import Router as Router
from tests.integration.fake_model.script import Script as Script
from tests.integration.fake_model.script import Steps as Steps
from tests.integration.fake_model.script import StopWhen as StopWhen
from tests.integration.fake_model.script import ToolCall as ToolCall
from tests.integration.fake_model.script import ToolOutcome as ToolOutcome
from tests.integration.fake_model.script import When as When
from tests.integration.fake_model.script import all_strings as all_strings
from tests.integration.fake_model.script import refused_with as refused_with
from tests.integration.fake_model.server import FakeModel as FakeModel
