"""Loading and saving agents: our checkpoints and the RLOR authors' published state dicts.

Our checkpoint is a dict written by ``ppo_or.py`` (see ``save_checkpoint``) holding ``format``,
``problem``, ``num_nodes``, ``model_config``, ``model`` (the agent's state dict) and the training
state. An RLOR checkpoint is the plain ``Agent.state_dict()`` of the original code; its keys are
mapped onto ours by ``convert_rlor_state_dict``. Everything is read with ``weights_only=True``.
"""

from __future__ import annotations

import os
import re
import tempfile
from importlib import resources
from pathlib import Path

import torch
from ppoor.models.agent import Agent
from ppoor.models.attention_model import check_prior
from ppoor.models.embeddings import upgrade_vrp_weights

FORMAT = "ppo-or/1"

RLOR_KEY_MAP = [
    (r"backbone\.embedding\.init_embed\.", "embedding.node."),
    (r"backbone\.embedding\.init_embed_depot\.", "embedding.depot."),
    (r"backbone\.encoder\.layers\.(\d+)\.0\.module\.queryEncoder\.", r"encoder.\1.attention.query."),
    (r"backbone\.encoder\.layers\.(\d+)\.0\.module\.keyEncoder\.", r"encoder.\1.attention.key."),
    (r"backbone\.encoder\.layers\.(\d+)\.0\.module\.valueEncoder\.", r"encoder.\1.attention.value."),
    (r"backbone\.encoder\.layers\.(\d+)\.0\.module\.MHA\.project_out\.", r"encoder.\1.attention.out."),
    (r"backbone\.encoder\.layers\.(\d+)\.1\.normalizer\.", r"encoder.\1.norm1."),
    (r"backbone\.encoder\.layers\.(\d+)\.2\.module\.", r"encoder.\1.feed_forward."),
    (r"backbone\.encoder\.layers\.(\d+)\.3\.normalizer\.", r"encoder.\1.norm2."),
    (r"backbone\.decoder\.project_node_embeddings\.", "decoder.project_node."),
    (r"backbone\.decoder\.project_fixed_context\.", "decoder.project_graph."),
    (r"backbone\.decoder\.project_step_context\.", "decoder.project_context."),
    (r"backbone\.decoder\.glimpse\.project_out\.", "decoder.glimpse_out."),
    (r"backbone\.decoder\.context\.W_placeholder$", "context.placeholder"),
    (r"critic\.mlp\.", "critic."),
]


class CheckpointError(ValueError):
    """A checkpoint that is missing, unreadable, or does not fit what was asked."""


def is_rlor_state_dict(obj) -> bool:
    return isinstance(obj, dict) and "backbone.embedding.init_embed.weight" in obj


def rlor_problem(state_dict: dict) -> str:
    """The problem of an RLOR state dict: "cvrp" if it has a depot embedding, else "tsp"."""
    return "cvrp" if "backbone.embedding.init_embed_depot.weight" in state_dict else "tsp"


def convert_rlor_state_dict(state_dict: dict) -> dict:
    """Maps the original RLOR agent's keys onto ours; raises on a key it does not know."""
    converted = {}
    for key, value in state_dict.items():
        for pattern, replacement in RLOR_KEY_MAP:
            new_key, count = re.subn(pattern, replacement, key)
            if count:
                converted[new_key] = value
                break
        else:
            raise CheckpointError(f"unknown key {key!r} in the RLOR checkpoint; is it an RLOR Attention Model agent?")
    return converted


def shipped_checkpoint(name: str | os.PathLike) -> Path | None:
    """A checkpoint shipped with ppo-or (``checkpoints/`` of a checkout, ``ppoor/checkpoints`` of an
    install, read through importlib.resources) named by its path inside that folder, with or without
    ``checkpoints/`` and ``.pt``: ``tsp20``, ``families/op20.pt``, ``checkpoints/mtvrp20.pt``. None
    when there is no such file."""
    rel = str(name).replace("\\", "/").removeprefix("./").removeprefix("checkpoints/")
    rel = rel if rel.endswith(".pt") else f"{rel}.pt"
    if not rel or any(part in ("", ".", "..") for part in rel.split("/")):
        return None
    candidate = resources.files("ppoor.checkpoints")
    for part in rel.split("/"):  # one part at a time: a namespace package's path takes one
        candidate = candidate.joinpath(part)
    return Path(str(candidate)) if candidate.is_file() else None


def shipped_names() -> list[str]:
    """The names of the shipped checkpoints (``tsp20``, ``families/op20``, ...)."""

    def walk(folder, prefix: str):
        for child in folder.iterdir():
            if child.is_dir():
                yield from walk(child, f"{prefix}{child.name}/")
            elif child.name.endswith(".pt"):
                yield prefix + child.name[: -len(".pt")]

    return sorted(walk(resources.files("ppoor.checkpoints"), ""))


def latest_checkpoint(path: str | os.PathLike) -> Path:
    """``path`` itself if it is a file; for a run folder (or its ckpt/ folder) the checkpoint of the
    highest iteration in it; a name that is no path but a shipped checkpoint's (``shipped_checkpoint``)
    that checkpoint."""
    path = Path(path)
    if not path.exists() and (shipped := shipped_checkpoint(path)):
        return shipped
    if not path.is_dir():
        return path
    folder = path / "ckpt" if (path / "ckpt").is_dir() else path
    numbered = [p for p in folder.glob("*.pt") if p.stem.isdigit()]
    if not numbered:
        raise CheckpointError(f"{path} holds no checkpoint (<iteration>.pt, in it or in its ckpt/ folder)")
    return max(numbered, key=lambda p: int(p.stem))


def read_checkpoint(path: str | os.PathLike) -> dict:
    """Reads a checkpoint of either kind into our format (``model`` holds our keys)."""
    path = Path(path)
    if not path.is_file():
        raise CheckpointError(f"checkpoint {path} does not exist (the shipped ones: {', '.join(shipped_names())})")
    try:
        obj = torch.load(path, map_location="cpu", weights_only=True)
    except Exception as exc:  # torch raises many kinds for corrupt or foreign files
        lines = [line.strip() for line in str(exc).splitlines() if line.strip()]
        detail = lines[0].split(". ")[0] if lines else ""  # torch's own text runs over many lines
        raise CheckpointError(
            f"checkpoint {path} cannot be read ({type(exc).__name__}: {detail}); "
            "give a ppo_or.py checkpoint or a published RLOR state dict"
        ) from exc
    if is_rlor_state_dict(obj):
        problem = rlor_problem(obj)
        # the state dict does not record the training size; RLOR names its files like tsp50-v0-12000.pt
        size = re.match(rf"{problem}(\d+)", path.name)
        return {
            "format": "rlor",
            "problem": problem,
            "num_nodes": int(size.group(1)) if size else 50,
            "model_config": {},
            "model": convert_rlor_state_dict(obj),
        }
    if isinstance(obj, dict) and obj.get("format") == FORMAT:
        if obj.get("problem") == "mtvrp" and isinstance(obj.get("model"), dict):
            obj["model"] = upgrade_vrp_weights(obj["model"])
        return obj
    raise CheckpointError(f"{path} is neither a ppo-or checkpoint nor an RLOR agent state dict")


def load_agent(
    path: str | os.PathLike, problem: str | None = None, device: str | torch.device = "cpu"
) -> tuple[Agent, dict]:
    """Builds the agent of a checkpoint and loads its weights; returns (agent in eval mode, checkpoint).

    ``problem``, when given, must match the checkpoint's problem.
    """
    ckpt = read_checkpoint(path)
    if ckpt["problem"] == "rail":
        raise CheckpointError(f"checkpoint {path} is a railway (Flatland) policy: evaluate it with eval_flatland.py")
    if problem is not None and ckpt["problem"] != problem:
        raise CheckpointError(
            f"checkpoint {path} is a {ckpt['problem'].upper()} model, but a {problem.upper()} model was asked for"
        )
    config = ckpt.get("model_config", {})
    try:
        agent = Agent(ckpt["problem"], **config)
    except (TypeError, ValueError) as exc:  # a setting this version does not know, or a value it refuses
        raise CheckpointError(f"checkpoint {path} has model settings this version cannot build ({config}): {exc}") from exc
    try:
        agent.load_state_dict(ckpt["model"])
    except RuntimeError as exc:
        raise CheckpointError(f"checkpoint {path} does not fit the {ckpt['problem']} model: {exc}") from exc
    return agent.to(device).eval(), ckpt


def save_checkpoint(payload: dict, path: str | os.PathLike) -> None:
    """Writes atomically: a temporary file in the same folder, then a rename over ``path``."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=path.name, suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as f:
            torch.save({"format": FORMAT, **payload}, f)
            f.flush()
            os.fsync(f.fileno())
        umask = os.umask(0)
        os.umask(umask)
        os.chmod(tmp, 0o666 & ~umask)  # mkstemp's file is private (0600); a checkpoint is an ordinary file
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


SHIPPED_KEYS = (
    *("problem", "num_nodes", "model_config", "model", "args", "global_step", "elapsed_seconds"),
    *("release_model", "release_config", "release_threshold"),  # the railway policy's learned release
)


def export_weights(
    source: str | os.PathLike, target: str | os.PathLike, kept: bool = False, distance_prior: float | None = None
) -> None:
    """Writes the evaluation part of a checkpoint (weights, problem, size and training arguments;
    no optimizer or random states) to ``target``: the few-MB files shipped in checkpoints/. They
    load with ``load_agent`` and eval.py; ``--resume`` refuses them. ``kept``: the weights of the
    policy a ppo_flatland.py state keeps for its best validation (``--keep-best``; a run stopped
    before its end holds its last weights beside them) instead of its last. ``distance_prior``: the
    decoder's prior (``models.attention_model.distance_bias``) the model decodes with, chosen on
    validation data, in place of the one it was trained with."""
    ckpt = read_checkpoint(source)
    if kept:
        best = ckpt.get("best") or {}
        if best.get("model") is None:
            raise CheckpointError(
                f"checkpoint {source} keeps no best policy (only ppo_flatland.py states with --keep-best do, "
                "once a validation has run): export it without --kept"
            )
        ckpt = {**ckpt, "model": best["model"]}
    if distance_prior is not None:
        ckpt = {**ckpt, "model_config": {**ckpt.get("model_config", {}), "distance_prior": check_prior(distance_prior)}}
    save_checkpoint({key: ckpt[key] for key in SHIPPED_KEYS if key in ckpt}, target)
