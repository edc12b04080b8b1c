"""The agent's configuration: one YAML file, every section validated, errors name the field.

Each section's dataclass lives here, beside the loader, so every room reads its settings from this one low
layer and the config never imports the code it configures.
"""

from agent.config.agent import AgentConfig, load_config
from agent.config.load import ConfigError

__all__ = ["AgentConfig", "ConfigError", "load_config"]
