"""Reading config files (the I/O half of :mod:`config.fleet`)."""

from __future__ import annotations

import sys
from pathlib import Path

import loopwatch.detectors.rules.registry  # noqa: F401 (hands the rules' config sections to config)
from loopwatch.config.errors import ConfigError, ConfigProblem
from loopwatch.config.fleet import FleetConfig, parse_config_text
from loopwatch.config.settings import DetectorSettings

__all__ = ["load_config"]


def load_config(path: str | None, settings: DetectorSettings | None = None) -> FleetConfig:
    """The config of a file, or the product default (detection enabled) without one."""
    if path is None:
        return FleetConfig.enabled_default(settings)
    variable = getattr(path, "variable", "")  # a path from the environment (LOOPWATCH_CONFIG)
    source = f"{path} (from {variable})" if variable else path
    try:
        text = Path(path).read_text(encoding="utf-8")
    except OSError as exc:
        raise ConfigError([ConfigProblem("", f"cannot read config file: {exc.strerror}")], source) from exc
    except UnicodeDecodeError as exc:
        problem = f"not a text file (UTF-8): byte 0x{exc.object[exc.start]:02x} at offset {exc.start}"
        raise ConfigError([ConfigProblem("", problem)], source) from exc
    config = parse_config_text(text, source=source, settings=settings)
    for warning in config.warnings:
        print(f"loopwatch: {path}: warning: {warning}", file=sys.stderr)
    return config
