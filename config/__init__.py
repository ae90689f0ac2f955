"""Configuration: OpenClaw's ``tools.loopDetection`` model and loopwatch's own settings.

Pure: no I/O, no clock. Files are read by the caller and parsed here from text.
"""

from loopwatch.config.errors import ConfigError, ConfigProblem, LoopwatchError
from loopwatch.config.fleet import FleetConfig, parse_config_text, parse_config_value
from loopwatch.config.loop_detection import (
    ResolvedLoopDetection,
    as_positive_int,
    merge_agent,
    resolve,
    validate_block,
)
from loopwatch.config.settings import DetectorSettings, parse_settings

__all__ = [
    "ConfigError",
    "ConfigProblem",
    "DetectorSettings",
    "FleetConfig",
    "LoopwatchError",
    "ResolvedLoopDetection",
    "as_positive_int",
    "merge_agent",
    "parse_config_text",
    "parse_config_value",
    "parse_settings",
    "resolve",
    "validate_block",
]
