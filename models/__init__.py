"""The refactored Attention Model: cached encoder, parallel decoding, state wrapper, checkpoints."""

from ppoor.models.agent import Agent, compile_step, compiler_problem
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
    "compile_step",
    "compiler_problem",
    "export_weights",
    "latest_checkpoint",
    "load_agent",
    "read_checkpoint",
    "save_checkpoint",
]
