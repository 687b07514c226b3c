"""The CleanRL-style agent: the Attention Model with actor (logits) and critic (value) heads."""

from __future__ import annotations

import torch
from ppoor.models.attention_model import AttentionModel, Cache


class Agent(AttentionModel):
    """``get_action_and_value`` and ``get_value`` as in CleanRL, over N trajectories per instance.

    ``state`` is the dict of tensors made by ``models.state.StateWrapper``: the static arrays
    [B, ...] and the dynamic ones [B, N, ...]. Pass ``cache=agent.encode(state)`` to decode from a
    cached encoding (the encoder then runs once per rollout); without it the encoder runs on every
    call.
    """

    def get_value(self, state: dict, cache: Cache | None = None) -> torch.Tensor:
        """Values [B, N]."""
        return self(self.encode(state) if cache is None else cache, state)[1]

    def get_action_and_value(
        self,
        state: dict,
        action: torch.Tensor | None = None,
        cache: Cache | None = None,
        greedy: bool = False,
        with_value: bool = True,
        entropy_grad: bool = True,
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor | None]:
        """Returns action [B, N] (sampled, or the argmax if ``greedy``, unless given), its
        log-probability [B, N], the policy entropy [B, N] and the value [B, N] (None unless
        ``with_value``: the critic is skipped). ``entropy_grad=False`` computes the entropy outside
        the autograd graph (a statistic only: no bonus on it)."""
        logits, value = self(self.encode(state) if cache is None else cache, state, with_value)
        logp = torch.log_softmax(logits, dim=-1)  # -inf on masked actions
        if action is None:
            action = logits.argmax(-1) if greedy else sample(logp)
        logprob = logp.gather(-1, action[..., None]).squeeze(-1)
        with torch.set_grad_enabled(entropy_grad and torch.is_grad_enabled()):
            entropy = -(logp.exp() * logp.masked_fill(~state["action_mask"], 0.0)).sum(-1)
        return action, logprob, entropy, value


def sample(logp: torch.Tensor, generator: torch.Generator | None = None) -> torch.Tensor:
    """One action per query from log-probabilities [B, N, A] -> [B, N], by inverting the CDF with
    one uniform number per query (several times faster than torch.multinomial on CPU). u lies in
    (0, total], so the first index whose CDF reaches u always has a positive probability."""
    cdf = logp.exp().cumsum(-1)
    u = 1 - torch.rand(*cdf.shape[:-1], 1, device=cdf.device, generator=generator)
    return torch.searchsorted(cdf, u * cdf[..., -1:]).squeeze(-1)


def compile_step(agent: Agent) -> Agent:
    """Compiles the agent's decode step (``forward``: logits [B, N, A] and values [B, N] from the cached
    encoding, in rollouts, decoding and the PPO update) with ``torch.compile`` (inductor), in place; the
    encoder stays eager, and the weights and their names do not change. The first steps of each new
    shape compile (seconds); ``bench/eval_throughput.py --compile`` measures what it saves. Raises
    ``ValueError`` where inductor finds no working C++ compiler (``compiler_problem``)."""
    if problem := compiler_problem():
        raise ValueError(problem)
    agent.compile()
    return agent


def compiler_problem() -> str | None:
    """None where torch's inductor finds a working C++ compiler (its own search: $CXX, then g++,
    clang++ on macOS), else a one-line message that says what to install."""
    from torch._inductor import cpp_builder  # imported on use: it is heavy

    try:
        cpp_builder.get_cpp_compiler()
    except Exception as error:
        return f"compiling the decode step needs a C++ compiler for torch's inductor (install g++ or set CXX): {error}"
    return None
