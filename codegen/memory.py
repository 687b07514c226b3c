"""The evolving memory of the MLEM action: past trajectories, and the lessons the memory model
distils from them, retrieved for a new problem by the similarity of its constraint families.

Kept apart from the planner's replay buffer (the paper's design); persisted as JSON
(``runs/<run>/memory.json``), written atomically.
"""

from __future__ import annotations

import json
import os
import re
from dataclasses import asdict, dataclass, field

MAX_LESSONS = 200
MAX_TRAJECTORIES = 500


@dataclass
class Lesson:
    """One distilled line and the constraint families of the problem it came from."""

    text: str
    families: list[str]
    problem: str


@dataclass
class Memory:
    """``trajectories``: {problem, families, steps: [{action, code, feedback}], outcome}, where each
    step's feedback is the error or the checker's verdict that the next step fixes; ``lessons``."""

    trajectories: list[dict] = field(default_factory=list)
    lessons: list[Lesson] = field(default_factory=list)

    @classmethod
    def load(cls, path: str) -> Memory:
        """The memory stored at ``path``; empty when there is no file. ValueError when malformed."""
        if not os.path.exists(path):
            return cls()
        try:
            with open(path) as f:
                data = json.load(f)
            return cls(data["trajectories"], [Lesson(**x) for x in data["lessons"]])
        except (OSError, json.JSONDecodeError, KeyError, TypeError) as e:
            raise ValueError(f"{path} is not a memory file ({e})") from None

    def save(self, path: str) -> None:
        tmp = path + ".tmp"
        with open(tmp, "w") as f:
            json.dump({"trajectories": self.trajectories, "lessons": [asdict(x) for x in self.lessons]}, f, indent=1)
        os.replace(tmp, path)

    def retrieve(self, families: list[str], k: int = 6) -> list[Lesson]:
        """The k lessons whose families are most like ``families`` (Jaccard similarity; the most
        recent first among equals); none that share no family."""
        want = set(families)
        scored = []
        for age, lesson in enumerate(reversed(self.lessons)):
            have = set(lesson.families)
            overlap = len(want & have) / len(want | have) if want | have else 0.0
            if overlap > 0:
                scored.append((-overlap, age, lesson))
        return [lesson for _, _, lesson in sorted(scored, key=lambda t: t[:2])[:k]]

    def add(self, problem: dict, steps: list[dict], outcome: str, lessons: list[str]) -> None:
        """Record one trajectory and the lessons distilled from it (duplicates dropped; the oldest
        forgotten beyond the caps)."""
        self.trajectories.append({"problem": problem["name"], "families": problem["families"], "steps": steps,
                                  "outcome": outcome})
        known = {x.text for x in self.lessons}
        for text in lessons:
            if text not in known:
                self.lessons.append(Lesson(text, list(problem["families"]), problem["name"]))
                known.add(text)
        self.trajectories = self.trajectories[-MAX_TRAJECTORIES:]
        self.lessons = self.lessons[-MAX_LESSONS:]


ITEM = re.compile(r"^\s*(?:[-*\u2022]|\d{1,2}[.)])\s+(\S.{3,})$")


def parse_lessons(text: str, limit: int = 3) -> list[str]:
    """The list items ("- x", "* x", "1. x") of the memory model's reply: at most ``limit``
    distinct ones, each at most 300 characters."""
    out = []
    for line in text.splitlines():
        match = ITEM.match(line)
        if match and (item := match.group(1).strip()[:300]) not in out:
            out.append(item)
    return out[:limit]


def format_lessons(lessons: list[Lesson]) -> str:
    """Lessons for a prompt, each with the problem it came from."""
    if not lessons:
        return "(no lessons yet)"
    return "\n".join(f"- {x.text} (from {x.problem})" for x in lessons)
