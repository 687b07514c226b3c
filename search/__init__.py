"""Search: decoding strategies that turn a trained policy into solutions (greedy, multi-greedy,
sampling with temperature / top-k / top-p, multi-sampling, x8 augmentation), shared by eval.py,
the Python API (``solver``) and ppo_or.py's periodic evaluation."""

from ppoor.checkers.tours import InvalidTourError, tour_length, validate_tour
from ppoor.search.decoding import (
    DECODES,
    DecodeResult,
    Decoding,
    allowed_starts,
    augment,
    decode,
    only_actions,
    rollout,
)

__all__ = [
    "DECODES",
    "DecodeResult",
    "Decoding",
    "InvalidTourError",
    "allowed_starts",
    "augment",
    "decode",
    "only_actions",
    "rollout",
    "tour_length",
    "validate_tour",
]
