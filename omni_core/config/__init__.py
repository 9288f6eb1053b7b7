"""Pipeline configuration (YAML or Python) and process-wide settings."""

from omni_core.config.pipeline import InputEdge, PipelineConfig, RestartPolicy, StageConfig
from omni_core.config.settings import OmniSettings

__all__ = ["InputEdge", "OmniSettings", "PipelineConfig", "RestartPolicy", "StageConfig"]
