"""The settings rlea.py and eval_rlea.py share, and what they build from them: the problems, the LLM
backends, the sandbox's limits, retrieval (``LLMArgs``, ``LLM_LIMITS``, ``check_args``), the models
(``make_llms``), the planner's state embedding (``make_embedder``, ``encode``) and the planner file's name.
"""

import os
from dataclasses import dataclass
from typing import Literal

import numpy as np
from ppoor.codegen.llm import LOCAL_MODELS
from ppoor.training.runs import check_numbers, exp_name_problem, fail, wandb_problem

PLANNER = "planner.pt"  # the soft Q-network alone, what eval_rlea.py needs (with memory.json beside it)


@dataclass
class LLMArgs:
    """The settings rlea.py and eval_rlea.py share: problems, the models, the sandbox, retrieval."""

    problems: str | None = None
    """folder of problem .json files (default: the shipped benchmark, codegen/problems)"""
    llm_backend: Literal["local", "openai"] = "local"
    """the action model: a local CPU model (llama.cpp through xllamacpp) or an OpenAI-compatible endpoint"""
    llm_base_url: str | None = None
    """the endpoint of --llm-backend openai, e.g. http://localhost:8000/v1 (vLLM), http://localhost:11434/v1 (Ollama)"""
    llm_model: str | None = None
    """the model name at the endpoint; with --llm-backend local: qwen2.5-coder-0.5b (default, the rlea extra) or
    qwen2.5-coder-1.5b (the rlea-qwen extra)"""
    llm_key_env: str = "OPENAI_API_KEY"
    """the environment variable holding the endpoint's API key (unset: no key)"""
    memory_base_url: str | None = None
    """the memory model's endpoint (default: the action model serves as memory model too)"""
    memory_model: str | None = None
    """the memory model's name at --memory-base-url"""
    llm_threads: int = 1
    """CPU threads of the local model (one is faster than two on this 2-core machine)"""
    max_tokens: int = 768
    """the most tokens one program may take"""
    temperature: float = 0.2
    """the LLM's sampling temperature"""
    embedder: Literal["local", "hashing"] = "local"
    """the state embedding: the frozen Qwen2.5-Coder-0.5B's pooled hidden states, or a model-free hashed bag of words"""
    t_max: int = 6
    """the most planner steps after the direct attempt (the paper: 6)"""
    sandbox_seconds: float = 60.0
    """wall-clock limit of one program run (both instances)"""
    sandbox_memory_mb: int = 2048
    """address-space limit of one program run"""
    rag_docs: str | None = None
    """a folder of your own documents (.md, .txt, .py) added to the RAG corpus"""
    rag_k: int = 4
    """passages retrieved per RAG action"""


LLM_LIMITS = {
    "llm_threads": (1, 256),
    "max_tokens": (16, 32_768),
    "temperature": (0.0, 2.0),
    "t_max": (1, 50),
    "sandbox_seconds": (1.0, 3600.0),
    "sandbox_memory_mb": (256, 1_048_576),
    "rag_k": (1, 50),
}
"""The ranges of LLMArgs' numbers (eval_rlea.py's too)."""


def check_args(args, limits: dict) -> list[str]:
    """One line per bad argument of rlea.py or eval_rlea.py, before any model loads."""
    problems = check_numbers(args, limits)
    if hasattr(args, "exp_name") and (p := exp_name_problem(args.exp_name)):
        problems.append(p)
    if args.llm_backend == "openai" and not (args.llm_base_url and args.llm_model):
        problems.append("--llm-backend openai needs --llm-base-url and --llm-model")
    if args.llm_backend == "local" and args.llm_base_url:
        problems.append("--llm-base-url is for --llm-backend openai")
    if args.llm_backend == "local" and args.llm_model not in (None, *LOCAL_MODELS):
        problems.append(f"--llm-model {args.llm_model}: the local models are {', '.join(LOCAL_MODELS)}")
    if bool(args.memory_base_url) != bool(args.memory_model):
        problems.append("--memory-base-url and --memory-model go together")
    if args.problems is not None and not os.path.isdir(args.problems):
        problems.append(f"--problems {args.problems} is not a folder of problem .json files")
    if args.rag_docs is not None and not os.path.isdir(args.rag_docs):
        problems.append(f"--rag-docs {args.rag_docs} is not a folder")
    if getattr(args, "track", False) and (p := wandb_problem()):
        problems.append(p)
    return problems


def make_llms(args):
    """(action model, memory model) as the arguments ask; exits with one line when a backend cannot
    start (the local model's packages missing, say)."""
    from ppoor.codegen.llm import LocalChat, OpenAIChat

    try:
        if args.llm_backend == "openai":
            action = OpenAIChat(args.llm_base_url, args.llm_model, args.llm_key_env)
        else:
            action = LocalChat(args.llm_threads, args.seed, args.llm_model or LOCAL_MODELS[0])
        memory = OpenAIChat(args.memory_base_url, args.memory_model, args.llm_key_env) if args.memory_model else action
    except (ValueError, ImportError) as exc:
        fail([f"--llm-backend {args.llm_backend}: {exc}"])
    return action, memory


def make_embedder(args, path: str | None):
    """The cached state embedder: the frozen local model runs once per distinct text."""
    from ppoor.codegen.llm import CachedEmbedder, HashingEmbedder, LocalEmbedder

    return CachedEmbedder(LocalEmbedder(args.llm_threads) if args.embedder == "local" else HashingEmbedder(), path)


def embedder_problem(ckpt: dict, embed, flag: str) -> str | None:
    """A line when the planner of ``ckpt`` was trained on another embedder's states than ``embed``'s (the
    local model changed, say): its Q-network reads numbers this embedder does not write."""
    trained = ckpt.get("embedder")
    if trained is not None and trained != embed.name:
        return (f"{flag}: its planner was trained on states embedded by {trained}; this install embeds with "
                f"{embed.name}: train a planner with it (rlea.py) or pass --embedder hashing if that planner used it")
    return None


def encode(embed, texts: tuple[str, str]) -> np.ndarray:
    """The planner's state: [embedding of the description, embedding of the code] -> [2 D]."""
    return np.concatenate([embed(texts[0]), embed(texts[1] or "(no code)")]).astype(np.float32)
