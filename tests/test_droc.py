"""DRoC's problem files read as they are (codegen/droc.py): plain data only, never run; mapped to our
format where the semantics are ours, refused with the reason elsewhere; DRoC's published optimum
checked against ours. The files here are written for the tests in DRoC's layout (its repository's
problems/*.py: literal assignments, params_dict, input, optimal), never copied from it."""

import json
import subprocess
import sys
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from ppoor.codegen.benchmark import load_problems
from ppoor.codegen.droc import DRoCError, code_parts, droc_problem, read_droc

ROOT = Path(__file__).resolve().parents[1]
pytest.importorskip("ortools", reason="the reference solver needs OR-Tools (the rlea extra)")

LINE = [[abs(i - j) * 10 for j in range(5)] for i in range(5)]  # node i at 10 i on a line, depot 0


def droc_file(tmp_path, name: str, body: str) -> Path:
    path = tmp_path / f"{name}.py"
    path.write_text(body)
    return path


def layout(title: str, params: str, optimal, extra: str = "", matrix=LINE) -> str:
    """A DRoC problem module: the matrix, the parameters, params_dict, input and optimal."""
    return (f"problem = {matrix!r}\n{extra}params_dict = {{{params}}}\n"
            f"input = {{'problem': '{title}', 'code_example': '''def solve(...):\\n    return -1\\n''', "
            f"'solver': 'OR-tools'}}\noptimal = {optimal}\n")  # fmt: skip


def test_a_cvrp_file_maps_to_our_format_and_its_optimum_is_ours(tmp_path):
    extra = "demands = [0, 3, 3, 3, 3]\nvehicle_capacity = [6, 6]\nnum_veh = 2\n"
    params = ("'distance_matrix': problem, 'demands': demands, 'num_vehicle': num_veh, "
              "'vehicle_capacity': vehicle_capacity, 'depot': 0")  # fmt: skip
    # two routes of two customers each: 0-2-1-0 (40) and 0-4-3-0 (80)
    path = droc_file(tmp_path, "CVRP", layout("Capacitated Vehicle Routing Problem (CVRP)", params, 120, extra))
    problem = droc_problem(path, seconds=1.0)
    assert problem["families"] == ["capacity"] and problem["name"] == "droc-cvrp"
    assert problem["instance"]["capacity"] == 6 and problem["instance"]["demand"] == [0, 3, 3, 3, 3]
    assert problem["reference"]["objective"] == 120 and problem["reference"]["published"] == 120
    assert "published_ignores" not in problem["reference"]


def test_a_published_value_that_ignores_a_stated_limit_is_named(tmp_path):
    """DRoC's VRPL states a duration limit its published optimum breaks (46 for a tour of 46 with a
    limit of 40): ours stands, and the report says which constraint the published value leaves out."""
    pairs = [[0, 10, 10, 10, 10], [10, 0, 10, 15, 15], [10, 10, 0, 15, 15], [10, 15, 15, 0, 10], [10, 15, 15, 10, 0]]
    extra = "num_veh = 2\nduration_limit = 40\n"
    params = "'time_matrix': problem, 'num_vehicle': num_veh, 'depot': 0, 'duration_limit': duration_limit"
    # one tour 0-1-2-3-4-0 is 55 > 40; within the limit 0-1-2-0 and 0-3-4-0, 30 each
    path = droc_file(tmp_path, "VRPL", layout("Vehicle Routing Problem with Duration Limit (VRPL)", params, 55, extra,
                                              pairs))  # fmt: skip
    problem = droc_problem(path, seconds=1.0)
    assert problem["instance"]["max_route_distance"] == 40
    assert problem["reference"]["objective"] == 60
    assert problem["reference"]["published_ignores"] == ["distance_limit"]


@settings(max_examples=20, deadline=None)
@given(n=st.integers(2, 40), service=st.integers(0, 20), parts=st.integers(1, 9))
def test_plain_data_statements_are_evaluated_without_running_anything(tmp_path_factory, n, service, parts):
    tmp = tmp_path_factory.mktemp("droc")
    path = droc_file(tmp, "VRPS", f"problem = [[0] * {n}] * {n}\nservice_time = [{service}]*len(problem)\n"
                     f"service_time[0] = 0\nk = len(problem) // {parts}\nwindows = [(0, -5), (1, 2)]\n")  # fmt: skip
    names = read_droc(path)
    assert names["service_time"] == [0] + [service] * (n - 1) and names["k"] == n // parts
    assert names["windows"] == [(0, -5), (1, 2)]


@pytest.mark.parametrize(
    "body",
    [
        "import os\n",
        "x = __import__('os').system('touch {flag}')\n",
        "x = open('{flag}', 'w')\n",
        "x = (1).__class__\n",
        "def solve():\n    return 1\n",
        "print('hi')\n",
        "x = [1] * 10**9\n",
        "x = y\n",
    ],
)
def test_anything_but_plain_data_is_refused_and_never_run(tmp_path, body):
    flag = tmp_path / "ran"
    path = droc_file(tmp_path, "CVRP", body.format(flag=flag))
    with pytest.raises(DRoCError, match=r"CVRP.py:\d+: ") as raised:
        read_droc(path)
    assert "\n" not in str(raised.value) and not flag.exists()


def test_what_our_format_cannot_say_is_refused_with_the_reason(tmp_path):
    unknown = droc_file(tmp_path, "XVRP", layout("Some Other Problem (XVRP)", "'distance_matrix': problem", 10))
    with pytest.raises(DRoCError, match=r"XVRP.py \(XVRP\): not a code of DRoC's grammar"):
        droc_problem(unknown)
    extra = "demands = [0, 1, 1, 2, 2]\n"  # depot 1, the base of two vehicles, has a demand
    params = ("'distance_matrix': problem, 'demands': demands, 'num_vehicle': 3, 'vehicle_capacities': [5, 5, 5], "
              "'starts': [0, 1, 1], 'ends': [0, 1, 1]")  # fmt: skip
    depots = droc_file(tmp_path, "CVRPMD", layout("Capacitated Vehicle Routing Problem with Multiple Depots (CVRPMD)",
                                                  params, 10, extra))  # fmt: skip
    with pytest.raises(DRoCError, match=r"demands at depot 1, the base of 2 vehicles"):
        droc_problem(depots)
    assert code_parts("PCVRPTWMD") == {"PC", "VRP", "TW", "MD"} and code_parts("OCVRPL") == {"O", "C", "VRP", "L"}
    assert code_parts("TSPTWS") == {"TSP", "TW", "S"} and code_parts("XYZ") is None


WINDOWS = "time_windows = [(0, 5), (10, 15), (20, 25), (30, 35), (60, 65)]\n"


def test_time_windows_bound_the_departure_and_the_duration_counts_from_a_free_departure(tmp_path):
    """DRoC's VRPTWL on a line: the one route 0-1-2-3-4-0 (80) returns at 100, long after the depot's
    window (0, 5) closes (DRoC's window bounds the departure only), and lasts 95 only when it leaves
    at 5 rather than 0: within the duration limit 95 it is the optimum."""
    params = "'time_matrix': problem, 'time_windows': time_windows, 'num_vehicle': 2, 'depot': 0, 'duration_limit': 95"
    title = "Vehicle Routing Problem with Time Windows and Duration Limit (VRPTWL)"
    problem = droc_problem(droc_file(tmp_path, "VRPTWL", layout(title, params, 80, WINDOWS)), seconds=1.0)
    instance = problem["instance"]
    assert problem["families"] == ["time_windows"] and instance["depot_window"] == "departure"
    assert instance["max_route_duration"] == 95 and instance["time_windows"][4] == [60, 65]
    assert problem["reference"]["objective"] == 80 and problem["reference"]["routes"][0 if problem["reference"][
        "routes"][0] else 1] == [0, 1, 2, 3, 4, 0]  # fmt: skip
    assert "the return is not bound by it" in problem["description"]
    shorter = layout(title, params.replace("95", "94"), 80, WINDOWS)
    with pytest.raises(DRoCError, match="our solver found no solution"):
        droc_problem(droc_file(tmp_path, "VRPTWL", shorter), seconds=0.5)


def test_open_start_and_end_get_a_virtual_depot(tmp_path):
    """DRoC's OVRP: every node is a customer and a path may start and end anywhere; two paths over
    five points of a line (0, 10, .., 40) cost 40 less the widest gap, 30."""
    title = "Vehicle Routing Problem with Open Start and End locations (OVRP)"
    problem = droc_problem(droc_file(tmp_path, "OVRP", layout(title, "'distance_matrix': problem, 'num_vehicle': 2", 30)),
                           seconds=1.0)  # fmt: skip
    instance = problem["instance"]
    assert problem["families"] == ["open"] and len(instance["distance"]) == 6
    assert instance["distance"][0] == [0] * 6 and [row[0] for row in instance["distance"]] == [0] * 6
    assert instance["distance"][1][5] == 40  # DRoC's node i is our node i + 1
    assert problem["reference"]["objective"] == 30 and "virtual depot" in problem["description"]


def test_service_counts_in_the_objective_and_prizes_are_penalties(tmp_path):
    service = droc_file(tmp_path, "VRPS", layout(
        "Vehicle Routing Problem with Service Time (VRPS)",
        "'time_matrix': problem, 'num_vehicle': 2, 'depot': 0, 'service_time': [0, 5, 5, 5, 5]", 100))  # fmt: skip
    problem = droc_problem(service, seconds=1.0)
    assert problem["instance"]["objective"] == "time" and problem["reference"]["objective"] == 80 + 20
    # the tour 0-1-2-3-0 (60) within the limit 60, leaving node 4's prize of 1: 61
    prizes = droc_file(tmp_path, "PCTSP", layout(
        "Prize Collecting Travelling Salesman Problem (PCTSP)",
        "'distance_matrix': problem, 'prizes': prizes, 'max_distance': 60, 'depot': 0", 61,
        "prizes = [100, 100, 100]\nprizes.append(1)\nprizes.insert(0, 0)\n"))  # fmt: skip
    problem = droc_problem(prizes, seconds=1.0)
    assert problem["families"] == ["tsp", "distance_limit", "prize"]
    assert problem["instance"]["penalty"] == [0, 100, 100, 100, 1] and problem["reference"]["objective"] == 61


def test_a_depots_demand_is_loaded_on_its_vehicle_and_infeasibility_is_proven(tmp_path):
    extra = "demands = [0, 2, 2, 3, 3]\n"  # node 4 is vehicle 1's depot: its 3 units leave 3 of 6 for customers
    params = ("'distance_matrix': problem, 'demands': demands, 'num_vehicle': 2, 'vehicle_capacities': [6, 6], "
              "'starts': [0, 4], 'ends': [0, 4]")  # fmt: skip
    title = "Capacitated Vehicle Routing Problem with Multiple Depots (CVRPMD)"
    problem = droc_problem(droc_file(tmp_path, "CVRPMD", layout(title, params, 60, extra)), seconds=1.0)
    assert problem["instance"]["capacity"] == [6, 3] and problem["instance"]["demand"] == [0, 2, 2, 3, 0]
    assert "Node 4 is vehicle 1's depot and has a demand of 3" in problem["description"]
    assert problem["reference"]["objective"] == 60
    params = "'distance_matrix': problem, 'demands': [0, 3, 3, 3, 3], 'num_vehicle': 2, 'vehicle_capacities': [5, 5]"
    title = "Capacitated Vehicle Routing Problem with Open Start and End locations (OCVRP)"
    with pytest.raises(DRoCError, match="infeasible as stated: the demand 12 exceeds the fleet's capacity 10"):
        droc_problem(droc_file(tmp_path, "OCVRP", layout(title, params, 30)), seconds=0.5)


def test_only_appends_and_inserts_on_lists_are_read_as_calls(tmp_path):
    names = read_droc(droc_file(tmp_path, "PCTSP", "p = [1, 2]\np.append(3)\np.insert(0, 0)\nq = [9] + p\n"))
    assert names["q"] == [9, 0, 1, 2, 3]
    for body in ("p = [1]\np.pop()\n", "p = [1]\np.extend(open('x'))\n", "p = 1\np.append(2)\n"):
        with pytest.raises(DRoCError, match=r"PCTSP.py:2: "):
            read_droc(droc_file(tmp_path, "PCTSP", body))


def test_the_importer_writes_problems_eval_rlea_reads(tmp_path):
    folder = tmp_path / "problems"
    folder.mkdir()
    (folder / "TSP.py").write_text(layout("Travelling Salesman Problem (TSP)", "'distance_matrix': problem, 'depot': 0", 80))
    (folder / "OVRP.py").write_text(layout("Vehicle Routing Problem with Open Start and End locations (OVRP)",
                                           "'distance_matrix': problem, 'num_vehicle': 2", 40))  # fmt: skip
    out = tmp_path / "ours"
    run = subprocess.run([sys.executable, "-m", "ppoor.codegen.droc", str(folder), "--out", str(out), "--seconds", "0.5"],
                         cwd=ROOT, capture_output=True, text=True, timeout=300)  # fmt: skip
    assert run.returncode == 0, run.stderr
    assert "TSP.py: droc-tsp (tsp), our reference 80 (proven optimal); DRoC's optimal 80" in run.stdout
    assert "OVRP.py: droc-ovrp (open), our reference 30 (proven optimal); DRoC's optimal 40 (ours is 25.0% lower" in run.stdout
    assert "2 of 2 DRoC problems written" in run.stdout
    _, problem = load_problems(out)  # sorted by file name: droc-ovrp, droc-tsp
    assert problem["name"] == "droc-tsp" and json.loads((out / "droc-tsp.json").read_text())["reference"]["optimal"]
    bad = subprocess.run([sys.executable, "-m", "ppoor.codegen.droc", str(tmp_path / "none"), "--out", str(out)],
                         cwd=ROOT, capture_output=True, text=True, timeout=120)  # fmt: skip
    assert bad.returncode != 0 and "is not a folder of DRoC problem files" in bad.stderr


def test_depot_docks_map_and_a_limit_params_dict_forgot_is_read_from_the_file(tmp_path):
    """DRoC's RC: one dock, 5 minutes to dispatch and 4 to receive; CVRPTWRCL's file assigns
    duration_limit and names it in solve's signature, but leaves it out of params_dict."""
    windows = "time_windows = [(0, 30), (0, 100), (0, 100), (0, 100), (0, 100)]\n"
    params = ("'time_matrix': problem, 'time_windows': time_windows, 'num_vehicle': 2, 'vehicle_load_time': 5, "
              "'vehicle_unload_time': 4, 'depot_capacity': 1, 'depot': 0")  # fmt: skip
    body = layout("Vehicle Routing Problem with Time Windows, Resource Constraints, and Duration Limit (VRPTWRCL)",
                  params, 80, windows + "duration_limit = 80\n").replace("def solve(...)", "def solve(duration_limit)")
    problem = droc_problem(droc_file(tmp_path, "VRPTWRCL", body), seconds=1.0)
    instance, reference = problem["instance"], problem["reference"]
    assert problem["families"] == ["time_windows", "depot_docks"]
    assert (instance["load_time"], instance["unload_time"], instance["docks"]) == (5, 4, 1)
    assert instance["max_route_duration"] == 80 and reference["filled_from_file"] == ["duration_limit"]
    assert "returns (objective, routes, times)" in problem["description"] and "times" in problem["signature"]
    assert reference["objective"] == 80 and len(reference["times"]) == 2


def test_cp_sat_proves_the_reference_optimal_or_the_problem_infeasible(tmp_path):
    """VRPL on a line, where the one tour 0-1-2-3-4-0 (80) fits the limit 80, proven optimal; a VRPTW whose node 4 (40 minutes away) must be served by minute 5 proven infeasible,
    where no simple bound decides it."""
    params = "'time_matrix': problem, 'num_vehicle': 4, 'depot': 0, 'duration_limit': 80"
    vrpl = droc_file(tmp_path, "VRPL", layout("Vehicle Routing Problem with Duration Limit (VRPL)", params, 80))
    problem = droc_problem(vrpl, seconds=0.5, prove_seconds=10.0)
    assert problem["reference"]["optimal"] and problem["reference"]["objective"] == 80
    assert "cp-sat, proven optimal" in problem["reference"]["solver"]
    assert not droc_problem(vrpl, seconds=0.5)["reference"]["optimal"]  # without the proof: OR-Tools' best
    windows = "time_windows = [(0, 5), (0, 100), (0, 100), (0, 100), (0, 5)]\n"
    params = "'time_matrix': problem, 'time_windows': time_windows, 'num_vehicle': 2, 'depot': 0"
    late = droc_file(tmp_path, "VRPTW", layout("Vehicle Routing Problem with Time Windows (VRPTW)", params, 80, windows))
    with pytest.raises(DRoCError, match="infeasible as stated: CP-SAT proves that no solution exists"):
        droc_problem(late, seconds=0.5, prove_seconds=10.0)
