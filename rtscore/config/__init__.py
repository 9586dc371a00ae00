"""Validated configuration models (pydantic v2, unknown keys are errors)."""

from rtscore.config.base import ConfigError, config_hash, dump_yaml, load_config, parse_config
from rtscore.config.deployment import DeploymentConfig
from rtscore.config.generation import GenerationConfig
from rtscore.config.pipeline import PipelineConfig, load_pipeline_config, parse_pipeline_config

__all__ = [
    "ConfigError",
    "DeploymentConfig",
    "GenerationConfig",
    "PipelineConfig",
    "config_hash",
    "dump_yaml",
    "load_config",
    "load_pipeline_config",
    "parse_config",
    "parse_pipeline_config",
]
