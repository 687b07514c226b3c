"""The refactored Attention Model: cached encoder, parallel decoding, state wrapper, checkpoints."""

from ppoor.models.agent import Agent
from ppoor.models.attention_model import AttentionModel, Cache
from ppoor.models.checkpoints import (
    CheckpointError,
    export_weights,
    latest_checkpoint,
    load_agent,
    read_checkpoint,
    save_checkpoint,
)
from ppoor.models.state import StateWrapper

__all__ = [
    "Agent",
    "AttentionModel",
    "Cache",
    "CheckpointError",
    "StateWrapper",
    "export_weights",
    "latest_checkpoint",
    "load_agent",
    "read_checkpoint",
    "save_checkpoint",
]
