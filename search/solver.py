"""The Python API: a trained model applied to instances, as ``eval.py`` applies it.

    import ppoor

    result = ppoor.solve("test", ppoor.Decoding("multi-greedy", augment=8), checkpoint="tsp50", num_instances=100)
    print(result.mean_gap)                      # percent over the shipped LKH lengths
    model = ppoor.Model("cvrp50")               # loaded once, for repeated calls
    result = model.solve({"depot": depot, "coords": coords, "demand": demand, "capacity": 50})
    result.tours[0], result.lengths[0]          # routes (actions) and their checked lengths

Data are a standard set's name (``test`` / ``val``), the path of an .npz, TSPLIB / CVRPLIB /
Solomon file or a folder of them, a dict of arrays in the .npz layout (``data.datasets.from_arrays``),
or for TSP the coordinates alone ([B, n, 2] or one instance [n, 2]). Every tour is validated and
its cost recomputed by the checker (``checkers.tours``), in the data's own units. Bad input
raises ``DataError``, ``CheckpointError`` or ``ValueError`` (all ValueErrors) with the one-line
message the command line prints.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np
import torch
from ppoor.data.datasets import STANDARD_SETS, DataError, Dataset, check_references, load_data
from ppoor.envs import ENV_IDS, ENV_VARIANTS
from ppoor.envs.vrp import MIXES, VARIANTS
from ppoor.models import compile_step, latest_checkpoint, load_agent
from ppoor.search.decoding import MULTI_START, Decoding, trajectories, whole
from ppoor.search.decoding import decode as decode_instances
from ppoor.solvers.references import SOLVERS, solve_reference
from ppoor.training.runs import memory_problem

IMPLAUSIBLE_GAP = 5.0  # percent below the reference on most instances: the references are for other data


@dataclass
class Solutions:
    """The best solution the model found for each instance, in the order of the data.

    ``tours``: B arrays of actions (TSP the n nodes in visiting order; the depot problems the actions
    after the depot start, depot returns included); ``lengths`` [B]: their costs recomputed by the
    checker, in the data's units (TSPLIB's rounding for TSPLIB files, ...); ``references`` [B]:
    reference costs, NaN where unknown, and ``reference_source`` where they came from; ``seconds``:
    decoding time; ``groups``: the data as decoded (``data.datasets.Dataset``, one per instance
    size), for plots and solution files."""

    names: list
    tours: list
    lengths: np.ndarray
    references: np.ndarray
    seconds: float
    decode: str
    augment: int
    groups: list = field(repr=False)
    reference_source: str | None = None

    @property
    def gaps(self) -> np.ndarray:
        """Percent above the reference [B] (over |reference|: costs may be negative), NaN where unknown."""
        with np.errstate(invalid="ignore", divide="ignore"):
            return 100 * (self.lengths - self.references) / np.abs(self.references)

    def items(self):
        """(group, index in the group, tour, cost) of every instance, in the order of the data."""
        offset = 0
        for group in self.groups:
            for i in range(len(group.names)):
                yield group, i, self.tours[offset + i], float(self.lengths[offset + i])
            offset += len(group.names)

    @property
    def mean_gap(self) -> float | None:
        """The mean gap over the instances with a reference; None when none has one."""
        gaps = self.gaps
        known = np.isfinite(gaps)
        return float(gaps[known].mean()) if known.any() else None


class Model:
    """A trained model, loaded once: a shipped name (``"tsp50"``, ``"families/op20"``), a checkpoint
    of ``ppo_or.py``, a run folder (its latest checkpoint) or a published RLOR state dict, all read
    with ``weights_only=True``. ``problem``, when given, must be the checkpoint's; ``device``
    defaults to the GPU where there is one; ``compile`` compiles the decode step
    (``models.compile_step``: each new batch shape compiles first; whether it pays depends on the
    decode and the machine, ``bench/eval_throughput.py --compile``)."""

    def __init__(
        self, checkpoint: str | os.PathLike = "tsp20", problem: str | None = None, device=None, compile: bool = False
    ):
        self.device = torch.device(device or ("cuda" if torch.cuda.is_available() else "cpu"))
        self.path = latest_checkpoint(checkpoint)
        self.agent, ckpt = load_agent(self.path, problem=problem, device=self.device)
        if compile:
            compile_step(self.agent)
        self.problem: str = ckpt["problem"]
        self.num_nodes: int = ckpt["num_nodes"]  # the training size: the standard sets' default
        # the training variant (the VRP's, and the families' that have several): the standard sets' default
        env_id = ckpt.get("args", {}).get("env_id")
        self.variant: str | None = ENV_VARIANTS.get(env_id, "classic" if self.problem == "mtvrp" else None)

    def __repr__(self) -> str:
        return f"Model({str(self.path)!r}, problem={self.problem!r}, num_nodes={self.num_nodes})"

    def solve(
        self, data: str | os.PathLike | dict | np.ndarray = "test", decoding: Decoding | str = "greedy", *,
        num_instances: int | None = None, num_nodes: int | None = None, variant: str | None = None,
        references: str | os.PathLike | np.ndarray | None = None, reference_solver: str | None = None,
        solver_seconds: float = 1.0, progress: Callable[[int], object] | None = None,
    ) -> Solutions:  # fmt: skip
        """Decodes every instance of ``data`` as ``decoding`` says (a ``search.Decoding``, or a strategy's
        name: greedy, multi-greedy, sampling, multi-sampling, beam, multi-beam) and keeps its best solution.

        ``num_instances``: the first K only; ``num_nodes`` and ``variant``: the standard sets' size and
        variant (default the model's). ``references``: a CSV / .npy / solution .npz path or an array [B]
        of reference costs; without them a standard set takes the lengths shipped for it, where any;
        ``reference_solver`` (lkh, pyvrp, ortools, ``solver_seconds`` each) computes them instead.
        ``progress`` is called with the number of instances done after each batch.
        """
        decoding = Decoding(decoding) if isinstance(decoding, str) else decoding
        self.check_options(num_instances, num_nodes, variant, reference_solver)
        if isinstance(data, str) and data in STANDARD_SETS:  # before drawing the set: its size and count are known
            self.check_memory(decoding, num_nodes or self.num_nodes, num_instances or 1)
        groups, source = self.load(data, num_instances, num_nodes, variant, references)
        if reference_solver:
            source = f"{reference_solver}, {solver_seconds:g} s per instance"
        for group in groups:  # before any decoding: every group fits
            if decoding.strategy in MULTI_START and decoding.num_starts and decoding.num_starts > group.num_nodes:
                raise ValueError(
                    f"--num-starts {decoding.num_starts} exceeds the {group.num_nodes} start nodes of {group.names[0]}"
                    f" ({'nodes' if self.problem == 'tsp' else 'customers'})"
                )
            self.check_memory(decoding, group.num_nodes, len(group.names))
        tours, lengths, refs, seconds = [], [], [], 0.0
        for group in groups:
            result = decode_instances(self.agent, group.instances, decoding, progress=progress)
            tours += result.tours
            lengths.append([group.reported_length(i, tour) for i, tour in enumerate(result.tours)])
            if reference_solver:
                refs.append(
                    [solve_reference(group, i, reference_solver, solver_seconds) for i in range(len(result.tours))]
                )
            else:
                refs.append(group.references)
            seconds += result.seconds
        solutions = Solutions(
            names=[n for g in groups for n in g.names],
            tours=tours,
            lengths=np.concatenate(lengths).astype(np.float64),
            references=np.concatenate(refs).astype(np.float64),
            seconds=seconds,
            decode=decoding.strategy,
            augment=decoding.augment,
            groups=groups,
            reference_source=source,
        )
        check_plausible(solutions)
        return solutions

    def check_memory(self, decoding: Decoding, nodes: int, instances: int) -> None:
        """Refuses, before decoding, ``instances`` instances of ``nodes`` nodes that would not fit in memory."""
        count = trajectories(decoding.strategy, decoding.num_starts or nodes + 1, decoding.num_samples,
                             decoding.beam_width)  # fmt: skip
        needed = decode_memory(nodes, min(decoding.batch_size, instances) * decoding.augment, count)
        if problem := memory_problem(needed, self.device, f"decoding {nodes}-node instances"):
            raise ValueError(f"{problem} (lower --batch-size, --num-starts or --augment, or decode smaller instances)")

    def check_options(self, num_instances, num_nodes, variant, reference_solver: str | None) -> None:
        """What can be checked before the data are read."""
        for name, value, low in (("num_instances", num_instances, 1), ("num_nodes", num_nodes, 2)):
            if value is not None and not whole(value, low):
                raise ValueError(f"{name} must be a whole number of at least {low}, got {value!r}")
        variants = variants_of(self.problem)
        if variant is not None and variant not in variants:
            raise ValueError(
                f"--variant {variant} does not fit this {self.problem.upper()} model"
                + (f" (its variants: {', '.join(sorted(variants))})" if variants else " (it has no variants)")
            )
        if reference_solver is not None:
            if reference_solver not in SOLVERS:
                raise ValueError(f"reference_solver must be one of {', '.join(SOLVERS)}, got {reference_solver!r}")
            if self.problem not in SOLVERS[reference_solver]:
                solves = " and ".join(p.upper() for p in SOLVERS[reference_solver])
                raise ValueError(f"--reference-solver {reference_solver} solves {solves}, not {self.problem.upper()}")

    def load(self, data, num_instances, num_nodes, variant, references) -> tuple[list[Dataset], str | None]:
        """The data as groups of equal-size instances with their references, and where those came from."""
        if isinstance(data, np.ndarray):
            if self.problem != "tsp":
                raise DataError(
                    f"bare coordinates are TSP instances; a {self.problem.upper()} model reads a dict of arrays"
                )
            data = {"coords": data[None] if data.ndim == 2 else data}
        if not isinstance(data, str | os.PathLike | dict):
            raise DataError(
                f"data must be a set name (test / val), a path or a dict of arrays, not {type(data).__name__}"
            )
        data = data if isinstance(data, dict) else str(data)
        given = references if isinstance(references, np.ndarray) else None
        path = None if references is None or given is not None else str(references)
        groups = load_data(
            data, self.problem, num_nodes or self.num_nodes, num_instances, path, variant or self.variant
        )
        if given is None:
            return groups, groups[0].reference_source
        count = sum(len(g.names) for g in groups)
        values = np.asarray(given, dtype=np.float64)
        if values.shape != (count,):
            raise DataError(f"references holds {list(values.shape)} values for {count} instances")
        check_references("references", self.problem, values)
        for group, part in zip(groups, np.split(values, np.cumsum([len(g.names) for g in groups])[:-1]), strict=True):
            group.references = part.copy()
        return groups, "given"


def solve(data="test", decoding: Decoding | str = "greedy", checkpoint: str | os.PathLike = "tsp20", device=None,
          **options) -> Solutions:  # fmt: skip
    """``Model(checkpoint, device=device).solve(data, decoding, **options)``: decodes ``data`` with a
    trained model in one call (see ``Model.solve`` for the options)."""
    return Model(checkpoint, device=device).solve(data, decoding, **options)


def decode_memory(nodes: int, rows: int, trajectories: int) -> float:
    """Bytes decoding needs, estimated: the encoder's self-attention over A = ``nodes`` + 1 actions
    (8 heads, scores and softmax of three layers' worth at once, float32) and the decoder's attention
    of every trajectory over the actions, for ``rows`` instance copies at once."""
    actions = nodes + 1
    return 4.0 * 8 * rows * (3 * actions**2 + 4 * trajectories * actions)


def check_plausible(solutions: Solutions) -> None:
    """References for other data (most tours far below them) are refused rather than reported."""
    gaps = solutions.gaps
    known = np.isfinite(gaps)
    if known.any() and (gaps[known] < -IMPLAUSIBLE_GAP).mean() > 0.5:
        raise DataError(
            f"the references do not fit these instances: {(gaps[known] < -IMPLAUSIBLE_GAP).sum()} of "
            f"{known.sum()} tours are over {IMPLAUSIBLE_GAP:g}% shorter than their reference (mean gap "
            f"{solutions.mean_gap:.2f}%); are they for another size or data set?"
        )


def variants_of(problem: str) -> set:
    """The variants of a problem's standard sets (the VRP's 48 and its mixes)."""
    if problem == "mtvrp":
        return {*VARIANTS, *MIXES}
    return {v for env_id, v in ENV_VARIANTS.items() if ENV_IDS[env_id] == problem}
