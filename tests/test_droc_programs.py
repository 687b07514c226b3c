"""Eleven OR-Tools programs we wrote for DRoC's problems (tests/data/droc_programs, labelled as ours),
judged exactly as a generated program is (sandbox, checker, reference) on problems the importer
reads from files in DRoC's layout written here (random, seeded; never DRoC's own files). Each
program is judged correct, and its copy without each constraint (``IGNORE``) wrong, with the reason."""

from __future__ import annotations

import math
import random
from pathlib import Path

import pytest
from ppoor.codegen.droc import DRoCError, droc_problem
from ppoor.codegen.executor import Executor
from ppoor.codegen.memory import Memory
from ppoor.codegen.sandbox import Sandbox

pytest.importorskip("ortools", reason="the programs and the reference solver need OR-Tools (the rlea extra)")
PROGRAMS = Path(__file__).parent / "data" / "droc_programs"
REASONS = {  # the constraint a copy leaves out -> what the checker must say of its answer
    "capacity": "exceeds the capacity",
    "distance_limit": "exceeds the limit",
    "time_windows": "window closes",
    "duration_limit": "than the duration limit",
    "service in the objective": "disagrees with its routes",
    "service_time": "window closes",
    "pickup_delivery": "pickup",
    "multi_depot": "must start at its depot",
    "depot_docks": "more than its",
}


def grid(rng: random.Random, n: int) -> list[list[int]]:
    points = [(rng.randint(0, 30), rng.randint(0, 30)) for _ in range(n)]
    return [[round(math.dist(a, b)) for b in points] for a in points]


def windows_along(rng: random.Random, d: list[list[int]], order: list[int], width: int) -> list[tuple[int, int]]:
    """Windows of ``width`` around the times of one vehicle driving ``order`` from depot 0."""
    out, clock, here = [(0, 10)] + [None] * (len(d) - 1), 0, 0
    for node in order:
        clock += d[here][node] + 2
        start = max(0, clock - rng.randint(0, width))
        out[node], here = (start, start + width), node
    return out


def droc_case(code: str, rng: random.Random) -> tuple[str, str, str]:
    """(title, params_dict's body, the assignments before it) of a random DRoC problem of ``code``."""
    n = 9
    d = grid(rng, n)
    demands = [0] + [rng.randint(1, 5) for _ in range(n - 1)]
    pairs = [[1, 2], [3, 4], [5, 6], [7, 8]]
    rng.shuffle(pairs)
    pairs = [[p, q] if rng.random() < 0.5 else [q, p] for p, q in pairs]
    if code == "CVRP":
        cap = max(5, math.ceil(sum(demands) / 2.5))
        return ("Capacitated Vehicle Routing Problem (CVRP)", f"'distance_matrix': problem, 'demands': {demands}, "
                f"'num_vehicle': 3, 'vehicle_capacity': [{cap}, {cap}, {cap}], 'depot': 0", "")  # fmt: skip
    if code == "CVRPL":
        cap, far = max(5, math.ceil(sum(demands) / 2.5)), max(d[0])
        return ("Capacitated Vehicle Routing Problem with Distance Limit (CVRPL)",
                f"'distance_matrix': problem, 'demands': {demands}, 'num_vehicle': 5, 'vehicle_capacities': "
                f"[{cap}] * 5, 'depot': 0, 'distance_limit': {2 * far + 12}", "")  # fmt: skip
    if code == "VRPTWRC":  # one dock, dispatching and receiving 6 minutes each, departures until 30
        order = rng.sample(range(1, n), n - 1)
        windows = [(0, 30)] + windows_along(rng, d, order, 30)[1:]
        return ("Vehicle Routing Problem with Time Windows and Resource Constraints (VRPTWRC)",
                f"'time_matrix': problem, 'time_windows': {windows}, 'num_vehicle': 3, 'vehicle_load_time': 6, "
                "'vehicle_unload_time': 6, 'depot_capacity': 1, 'depot': 0", "")  # fmt: skip
    if code in ("VRPTW", "VRPTWL"):
        order = rng.sample(range(1, n), n - 1)
        windows = windows_along(rng, d, order, 8)
        windows = [windows[0]] + [(w[0] // 2, w[0] // 2 + 12) if i % 2 else w for i, w in enumerate(windows[1:], 1)]
        limit = ""
        if code == "VRPTWL":  # departures free until 200: a late customer is reached by leaving late
            windows[0], limit = (0, 200), ", 'duration_limit': 60"
        title = "Vehicle Routing Problem with Time Windows" + (" and Duration Limit" if limit else "")
        return (f"{title} ({code})", f"'time_matrix': problem, 'time_windows': {windows}, 'num_vehicle': 4, "
                f"'depot': 0{limit}", "")  # fmt: skip
    if code == "VRPS":
        return ("Vehicle Routing Problem with Service Time (VRPS)",
                "'time_matrix': problem, 'num_vehicle': 2, 'depot': 0, 'service_time': service_time",
                "service_time = [3] * len(problem)\nservice_time[0] = 0\n")  # fmt: skip
    if code == "OVRPL":
        return ("Vehicle Routing Problem with Duration Limit and Open Start and End locations (OVRPL)",
                "'time_matrix': problem, 'num_vehicle': 2, 'duration_limit': 30", "")  # fmt: skip
    if code == "PDP":
        return ("Vehicle Routing with Pickups and Deliveries (PDP)",
                f"'distance_matrix': problem, 'pickups_deliveries': {pairs}, 'num_vehicle': 2, 'depot': 0", "")  # fmt: skip
    if code == "PCTSP":
        prizes = [0] + [rng.randint(5, 40) for _ in range(n - 1)]
        return ("Prize Collecting Travelling Salesman Problem (PCTSP)", f"'distance_matrix': problem, 'prizes': "
                f"{prizes}, 'max_distance': {2 * max(d[0]) + 10}, 'depot': 0", "")  # fmt: skip
    if code == "CVRPMD":
        cap = max(6, math.ceil(sum(demands) / 2))
        return ("Capacitated Vehicle Routing Problem with Multiple Depots (CVRPMD)",
                f"'distance_matrix': problem, 'demands': {demands}, 'num_vehicle': 3, 'vehicle_capacities': "
                f"[{cap}, {cap}, {cap}], 'starts': [0, 1, 2], 'ends': [0, 1, 2]", "")  # fmt: skip
    assert code == "PDPTWS"
    order = [v for pair in pairs for v in pair]
    windows = windows_along(rng, d, order, 25)
    return ("Vehicle Routing with Pickups and Deliveries, Time Windows, and Service Time (PDPTWS)",
            f"'time_matrix': problem, 'time_windows': {windows}, 'pickups_deliveries': {pairs}, 'num_vehicle': 3, "
            "'depot': 0, 'service_time': service_time", "service_time = [2] * len(problem)\nservice_time[0] = 0\n")  # fmt: skip


CASES = {  # program -> (DRoC's code, the constraints a copy leaves out)
    "cvrp": ("CVRP", ["capacity"]),
    "cvrpl": ("CVRPL", ["capacity", "distance_limit"]),
    "vrptw": ("VRPTW", ["time_windows"]),
    "vrptwl": ("VRPTWL", ["time_windows", "duration_limit"]),
    "vrps": ("VRPS", ["service in the objective"]),
    "ovrpl": ("OVRPL", ["distance_limit"]),
    "pdp": ("PDP", ["pickup_delivery"]),
    "pctsp": ("PCTSP", ["distance_limit"]),
    "cvrpmd": ("CVRPMD", ["capacity", "multi_depot"]),
    "pdptws": ("PDPTWS", ["pickup_delivery", "time_windows"]),
    "vrptwrc": ("VRPTWRC", ["depot_docks"]),
}


@pytest.fixture(scope="module")
def executor():
    return Executor(None, None, Sandbox(seconds=30, memory_mb=1024), None, Memory())


@pytest.mark.parametrize("program", sorted(CASES))
def test_our_program_is_judged_correct_and_each_broken_copy_wrong(tmp_path, executor, program):
    code, constraints = CASES[program]
    source = (PROGRAMS / f"{program}.py").read_text()
    assert "IGNORE = ()" in source and "Written by the ppo-or team" in source
    broken_left = set(constraints)
    for seed in range(8):  # random instances until each left-out constraint shows in some answer
        title, params, extra = droc_case(code, random.Random(f"{program}:{seed}"))
        path = tmp_path / f"{code}.py"
        path.write_text(f"problem = {grid(random.Random(f'{program}:{seed}'), 9)!r}\n{extra}params_dict = {{{params}}}\n"
                        f"input = {{'problem': '{title}', 'code_example': '', 'solver': 'OR-tools'}}\noptimal = None\n")  # fmt: skip
        try:
            problem = droc_problem(path, seconds=0.2)  # 10 nodes: OR-Tools has its best answer in milliseconds
        except DRoCError as exc:
            assert "no solution" in str(exc) or "infeasible" in str(exc), exc
            continue
        right = executor.evaluate(problem, source)
        assert right.success, (program, seed, right.feedback)
        for constraint in sorted(broken_left):
            copy = executor.evaluate(problem, source.replace("IGNORE = ()", f"IGNORE = ({constraint!r},)"))
            if not copy.valid:
                assert any(REASONS[constraint] in v for v in copy.violations), (program, constraint, copy.violations)
                broken_left.discard(constraint)
        if not broken_left:
            return
    pytest.fail(f"{program}: no instance of 8 on which leaving out {sorted(broken_left)} breaks the answer")
