"""Retrieval for the RAG action: BM25 (rank-bm25) over solver documentation, each passage with
its source.

The corpus: the routing API of the installed OR-Tools (the signature and docstring of every public
method of RoutingIndexManager, RoutingModel, RoutingDimension and Assignment, and the search
enums), our modelling notes per constraint family (``codegen/corpus/notes.md``), and any
folder of the user's own documents (``--rag-docs``: .md, .txt, .py files, split at blank lines or
headings; e.g. a checkout of OR-Tools' routing samples, Apache-2.0).
"""

from __future__ import annotations

import inspect
import re
from dataclasses import dataclass
from pathlib import Path

NOTES = Path(__file__).resolve().parent / "corpus" / "notes.md"
TOKEN = re.compile(r"[a-z]+|\d+")
CLASSES = ("RoutingIndexManager", "RoutingModel", "RoutingDimension", "Assignment")


@dataclass
class Passage:
    """One retrievable text and where it comes from."""

    source: str
    text: str


def tokens(text: str) -> list[str]:
    """Lower-case words, camelCase and snake_case split: ``AddDimensionWithVehicleCapacity`` ->
    add, dimension, with, vehicle, capacity."""
    spaced = re.sub(r"([a-z])([A-Z])", r"\1 \2", text).replace("_", " ")
    return TOKEN.findall(spaced.lower())


def ortools_passages() -> list[Passage]:
    """The routing API of the installed OR-Tools: one passage per public method."""
    import ortools
    from ortools.constraint_solver import pywrapcp, routing_enums_pb2

    out = []
    for cls_name in CLASSES:
        cls = getattr(pywrapcp, cls_name)
        for name, member in vars(cls).items():
            if name.startswith("_") or not callable(member):
                continue
            doc = inspect.cleandoc(member.__doc__ or "").strip()
            if not doc:
                continue
            out.append(Passage(f"ortools {ortools.__version__} pywrapcp.{cls_name}.{name}", f"{cls_name}.{name}: {doc[:900]}"))
    for enum_name in ("FirstSolutionStrategy", "LocalSearchMetaheuristic"):
        enum = getattr(routing_enums_pb2, enum_name).DESCRIPTOR.enum_types[0]
        values = ", ".join(v.name for v in enum.values)
        out.append(Passage(f"ortools {ortools.__version__} routing_enums_pb2.{enum_name}",
                           f"routing_enums_pb2.{enum_name}.<VALUE>, values: {values}"))
    return out


def markdown_passages(path: Path) -> list[Passage]:
    """A notes file split at its level-2 headings, one passage per section."""
    text = path.read_text()
    sections = re.split(r"\n(?=## )", text)
    return [Passage(f"{path.name}: {s.splitlines()[0].lstrip('# ')}", s.strip()) for s in sections if s.startswith("## ")]


def folder_passages(folder: str) -> list[Passage]:
    """A user's documents: each .md / .txt / .py file split at blank-line-separated blocks of
    about 1500 characters."""
    root = Path(folder)
    if not root.is_dir():
        raise ValueError(f"--rag-docs {folder} is not a folder")
    out = []
    for file in sorted(p for p in root.rglob("*") if p.suffix in (".md", ".txt", ".py") and p.is_file()):
        chunk = ""
        for block in re.split(r"\n\s*\n", file.read_text(errors="replace")):
            if len(chunk) + len(block) > 1500 and chunk:
                out.append(Passage(str(file.relative_to(root)), chunk.strip()))
                chunk = ""
            chunk += block + "\n\n"
        if chunk.strip():
            out.append(Passage(str(file.relative_to(root)), chunk.strip()))
    return out


class Retriever:
    """BM25 over the passages; ``search(query, k)`` returns the k best."""

    def __init__(self, passages: list[Passage]):
        from rank_bm25 import BM25Okapi

        if not passages:
            raise ValueError("the documentation corpus is empty")
        self.passages = passages
        self.index = BM25Okapi([tokens(p.source + " " + p.text) for p in passages])

    @classmethod
    def default(cls, extra_folder: str | None = None) -> Retriever:
        """The OR-Tools API, our notes, and the user's folder if given."""
        passages = ortools_passages() + markdown_passages(NOTES)
        if extra_folder:
            passages += folder_passages(extra_folder)
        return cls(passages)

    def search(self, query: str, k: int = 4) -> list[Passage]:
        scores = self.index.get_scores(tokens(query))
        order = sorted(range(len(scores)), key=lambda i: -scores[i])[:k]
        return [self.passages[i] for i in order if scores[i] > 0]


def format_passages(passages: list[Passage], limit: int = 3500) -> str:
    """Passages for a prompt, each headed by its source, within ``limit`` characters."""
    out, used = [], 0
    for p in passages:
        piece = f"[source: {p.source}]\n{p.text}\n"
        if used + len(piece) > limit:
            piece = piece[: max(0, limit - used)]
        out.append(piece)
        used += len(piece)
        if used >= limit:
            break
    return "\n".join(out)
