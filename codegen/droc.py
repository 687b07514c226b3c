"""DRoC's benchmark files (github.com/Summer142857/DRoC, ``problems/*.py``) read as they are, never run.

Each DRoC problem is a Python module of literal assignments: the matrix (``problem``), the
instance's parameters, ``params_dict`` naming what ``solve(...)`` receives, ``input`` (the problem's
name and the code example) and ``optimal``. ``read_droc`` parses a file with ``ast`` and evaluates
only literals, names assigned before, ``[x] * n``, list concatenation, ``len(name)``, item
assignments such as ``service_time[0] = 0`` and ``name.append(x)`` / ``name.insert(i, x)`` on a list;
anything else (another call, an import, an attribute) is refused with the line it is on, so a file
is data, never code.

``droc_problem`` maps a DRoC problem to our format (``codegen/benchmark.py``) part by part of its
code (``droc_instance``): time windows bound the departure only and a duration limit counts from a departure
free within them, service counts in the objective, open starts and ends get a virtual depot, prizes
not collected are penalties, and a demand at a depot is loaded on the one vehicle based there
(stated in the description); depot loading docks (RC) keep a dock busy from each departure and
from each return. The reference is recomputed with our solver, and CP-SAT (``codegen.proof``) then
tries to prove it optimal, or the problem infeasible; a problem without a solution is refused, with
a proof where CP-SAT or a simple bound gives one. DRoC's published ``optimal`` is kept beside ours,
and where it lies below ours, the stated constraint whose omission explains it is named
(``ignored_constraints``).

    python -m ppoor.codegen.droc DROC/problems --out droc_problems   # our JSON, one file per problem
    python eval_rlea.py --problems droc_problems --methods standard ...
"""

from __future__ import annotations

import argparse
import ast
import json
import re
import sys
from pathlib import Path

from ppoor.codegen.benchmark import describe, instance_error, is_int, relax, signature_of, solve_reference
from ppoor.solvers.rlea_references import per_vehicle


class DRoCError(ValueError):
    """A DRoC file that cannot be read or mapped, with the reason in one line."""


def read_droc(path: str | Path) -> dict:
    """The module-level assignments of a DRoC problem file, evaluated without running it: name ->
    value. Raises DRoCError naming the file and line of anything that is not plain data."""
    path = Path(path)
    try:
        tree = ast.parse(path.read_text(), filename=str(path))
    except (OSError, UnicodeDecodeError, SyntaxError) as exc:
        raise DRoCError(f"{path}: not a readable Python file ({exc})") from None
    names: dict = {}
    for node in tree.body:
        if isinstance(node, ast.Expr) and isinstance(node.value, ast.Constant):
            continue  # a docstring
        if isinstance(node, ast.Expr) and (edit := list_edit(node.value, names, path)):
            edit()
            continue
        if not isinstance(node, ast.Assign) or len(node.targets) != 1:
            raise DRoCError(f"{path}:{node.lineno}: only assignments of data are read, not {type(node).__name__}")
        target, value = node.targets[0], literal(node.value, names, path)
        if isinstance(target, ast.Name):
            names[target.id] = value
        elif isinstance(target, ast.Subscript) and isinstance(target.value, ast.Name) and target.value.id in names:
            container, key = names[target.value.id], literal(target.slice, names, path)
            try:
                container[key] = value
            except (TypeError, IndexError, KeyError) as exc:
                raise DRoCError(f"{path}:{node.lineno}: cannot assign item {key!r} ({exc})") from None
        else:
            raise DRoCError(f"{path}:{node.lineno}: only names and items of names are assigned")
    return names


def literal(node: ast.AST, names: dict, path: Path):
    """The value of a data expression: literals, containers, names bound before, ``[x] * n``,
    ``len(name)``, a unary minus, integer arithmetic (+, -, *, //)."""
    if isinstance(node, ast.Constant):
        return node.value
    if isinstance(node, ast.List | ast.Tuple | ast.Set):
        items = [literal(e, names, path) for e in node.elts]
        return tuple(items) if isinstance(node, ast.Tuple) else items if isinstance(node, ast.List) else set(items)
    if isinstance(node, ast.Dict):
        return {literal(k, names, path): literal(v, names, path) for k, v in zip(node.keys, node.values, strict=True)}
    if isinstance(node, ast.Name):
        if node.id not in names:
            raise DRoCError(f"{path}:{node.lineno}: {node.id} is used before it is assigned")
        return names[node.id]
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub):
        return -literal(node.operand, names, path)
    if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Mult | ast.Add | ast.Sub | ast.FloorDiv):
        left, right = literal(node.left, names, path), literal(node.right, names, path)
        if isinstance(node.op, ast.Mult) and isinstance(left, list) and is_int(right) and 0 <= right <= 1_000_000:
            return left * right
        if isinstance(node.op, ast.Add) and isinstance(left, list) and isinstance(right, list):
            return left + right
        if is_int(left) and is_int(right) and abs(left) <= 10**12 and abs(right) <= 10**12:
            if isinstance(node.op, ast.FloorDiv) and right == 0:
                raise DRoCError(f"{path}:{node.lineno}: division by zero")
            ops = {ast.Mult: int.__mul__, ast.Add: int.__add__, ast.Sub: int.__sub__, ast.FloorDiv: int.__floordiv__}
            return ops[type(node.op)](left, right)
    if (isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "len"
            and len(node.args) == 1 and not node.keywords):  # fmt: skip
        return len(literal(node.args[0], names, path))
    raise DRoCError(f"{path}:{node.lineno}: {ast.unparse(node)[:60]!r} is not plain data (not evaluated)")


def list_edit(node: ast.AST, names: dict, path: Path):
    """``name.append(x)`` or ``name.insert(i, x)`` on a list bound before, as a function doing it
    (the only calls read: they change data and run nothing); None for anything else."""
    if not (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and not node.keywords
            and isinstance(node.func.value, ast.Name) and isinstance(names.get(node.func.value.id), list)):  # fmt: skip
        return None
    target, method = names[node.func.value.id], node.func.attr
    args = [literal(a, names, path) for a in node.args]
    if method == "append" and len(args) == 1:
        return lambda: target.append(args[0])
    if method == "insert" and len(args) == 2 and is_int(args[0]):
        return lambda: target.insert(args[0], args[1])
    return None


ALIASES = {"vehicle_capacities": "vehicle_capacity", "num_vehicles": "num_vehicle", "time_matrix": "distance_matrix"}
"""DRoC's names of one argument: its signatures and its params_dict spell some of them two ways."""


def solve_arguments(names: dict) -> list[str]:
    """The argument names of the ``solve`` signature in ``input['code_example']`` (parsed, never
    run), or [] where there is none."""
    example = names.get("input", {}).get("code_example") if isinstance(names.get("input"), dict) else None
    try:
        tree = ast.parse(example or "")
    except SyntaxError:
        return []
    return [a.arg for node in tree.body if isinstance(node, ast.FunctionDef) and node.name == "solve" for a in node.args.args]


def problem_code(names: dict, path: Path) -> str:
    """DRoC's code of a problem (``CVRPTW``), from ``input['problem']`` ("... (CVRPTW)") or the file name."""
    title = names.get("input", {}).get("problem", "") if isinstance(names.get("input"), dict) else ""
    if "(" in title and title.rstrip().endswith(")"):
        return title.rsplit("(", 1)[1].rstrip(" )").upper()
    return path.stem.upper()


def droc_problem(path: str | Path, seconds: float = 2.0, prove_seconds: float = 0.0) -> dict:
    """Our problem (name, families, description, signature, instance, reference) for a DRoC file;
    DRoCError with the reason where its semantics or instance cannot be stated in our format, or
    where it has no solution. The reference: OR-Tools for ``seconds``, then CP-SAT for
    ``prove_seconds`` to prove it optimal (or the problem infeasible)."""
    path = Path(path)
    names = read_droc(path)
    code = problem_code(names, path)
    parts = code_parts(code)
    if parts is None:
        raise DRoCError(f"{path.name} ({code}): not a code of DRoC's grammar ([PC][O][C] VRP | TSP | PDP, then TW RC MD S L)")
    params = names.get("params_dict")
    if not isinstance(params, dict):
        raise DRoCError(f"{path.name}: no params_dict (the arguments of solve)")
    given = {ALIASES.get(k, k) for k in params}
    filled = {k: names[k] for k in solve_arguments(names) if ALIASES.get(k, k) not in given and k in names}
    params = {**params, **filled}  # an argument of solve the file assigns but params_dict forgot
    try:
        families, instance, notes = droc_instance(parts, params)
    except (KeyError, TypeError, ValueError) as exc:
        raise DRoCError(f"{path.name} ({code}): params_dict lacks or mistypes {exc}") from None
    if error := instance_error(instance, families):
        raise DRoCError(f"{path.name} ({code}): {error}")
    if len(instance["distance"]) < 2:
        raise DRoCError(f"{path.name}: a matrix of {len(instance['distance'])} node(s)")
    published = names.get("optimal")
    published = published if isinstance(published, int | float) and not isinstance(published, bool) else None
    answer = solve_reference(families, instance, seconds, prove_seconds)
    if answer is None or answer.get("infeasible"):
        why = infeasible(families, instance) or (
            f"infeasible as stated: CP-SAT proves that no solution exists ({prove_seconds:g} s)" if answer
            else f"our solver found no solution in {seconds:g} s (not proven infeasible)")  # fmt: skip
        ignores = ignored_constraints(families, instance, published, seconds) if published is not None else []
        raise DRoCError(f"{path.name} ({code}): {why}" + (
            f"; DRoC's published {published:g} is what the problem gives without its {', '.join(ignores)}"
            if ignores else ""))  # fmt: skip
    answer["published"] = published
    if filled:
        answer["filled_from_file"] = sorted(filled)
    if published is not None and answer["objective"] - published > GAP * abs(published):
        answer["published_ignores"] = ignored_constraints(families, instance, published, seconds)
    return {
        "name": f"droc-{code.lower()}",
        "families": families,
        "split": "test",
        "description": describe(families, instance) + notes,
        "signature": signature_of(families),
        "instance": instance,
        "reference": answer,
    }


LIMITS = ("distance_limit", "duration_limit", "max_distance", "max_duration", "max_time")
"""DRoC's names of the limit on each route (L, and the prize-collecting problems' route limit)."""
VIRTUAL_DEPOT = (
    " Node 0 is not a place: it is a virtual depot at distance 0 from every node and back, so a route starts "
    "at any customer and ends at any customer; every other node is a customer."
)


def droc_instance(parts: set[str], params: dict) -> tuple[list[str], dict, str]:
    """Our families and instance for a DRoC problem of code ``parts`` and arguments ``params``
    (``solve(**params)``), and what the description must add: DRoC's nodes keep their numbers,
    except with open starts and ends (O), where a virtual depot becomes node 0 and DRoC's node i is
    our node i + 1. A demand at a depot (DRoC's fleets start at customers) is loaded on the one
    vehicle based there, as OR-Tools counts it: that vehicle's capacity is reduced by it, and the
    description says so; a depot of several vehicles with a demand is refused."""
    matrix = params["distance_matrix"] if "distance_matrix" in params else params["time_matrix"]
    timed = bool(parts & {"TW", "S"})
    families = (["tsp"] if "TSP" in parts else []) + [family for part, family in (
        ("C", "capacity"), ("O", "open"), ("L", None if timed else "distance_limit"), ("S", "service_time"),
        ("TW", "time_windows"), ("MD", "multi_depot"), ("PC", "prize"), ("PDP", "pickup_delivery"),
        ("RC", "depot_docks"),
    ) if part in parts and family]  # fmt: skip
    if "PC" in parts and not timed:
        families.insert(-1, "distance_limit")
    shift = 1 if "O" in parts else 0
    n = len(matrix) + shift

    def per_node(values, at_depot):
        return [at_depot] * shift + [list(v) if isinstance(v, tuple) else v for v in values]

    if "O" in parts:
        matrix = [[0] * n] + [[0, *row] for row in matrix]
        vehicle_depots = [0] * params["num_vehicle"]
    elif "starts" in params or "ends" in params:
        if params.get("starts") != params.get("ends"):
            raise ValueError("starts and ends that differ (vehicles ending elsewhere than they start)")
        vehicle_depots = list(params["starts"])
    else:
        vehicle_depots = [params["depot"]] * (1 if "TSP" in parts else params.get("num_vehicle", params.get("num_vehicles", 1)))
    instance = {
        "distance": [list(row) for row in matrix],
        "depots": sorted(set(vehicle_depots)),
        "num_vehicles": len(vehicle_depots),
        "vehicle_depots": vehicle_depots,
    }
    if "C" in parts:
        instance["demand"] = per_node(params["demands"], 0)
        capacities = params["vehicle_capacities"] if "vehicle_capacities" in params else params["vehicle_capacity"]
        one = isinstance(capacities, list) and len(set(capacities)) == 1
        instance["capacity"] = capacities[0] if one else capacities
    limit = next((params[key] for key in LIMITS if key in params), None)
    if "L" in parts or ("PC" in parts and limit is not None):
        if limit is None:
            raise KeyError(" or ".join(LIMITS))
        instance["max_route_duration" if timed else "max_route_distance"] = limit
    if "PC" in parts:
        instance["penalty"] = per_node(params["prizes"], 0)
    if "S" in parts:
        instance["service_time"] = per_node(params["service_time"], 0)
        instance["objective"] = "time"
    if "TW" in parts:
        windows = per_node(params["time_windows"], None)
        if shift:
            windows[0] = [0, max(w[1] for w in windows[1:])]
        instance["time_windows"] = windows
        instance["depot_window"] = "departure"
    if "RC" in parts:
        instance["load_time"], instance["unload_time"] = params["vehicle_load_time"], params["vehicle_unload_time"]
        instance["docks"] = params["depot_capacity"]
    if "PDP" in parts:
        instance["pickup_delivery_pairs"] = [[p + shift, q + shift] for p, q in params["pickups_deliveries"]]
    notes = VIRTUAL_DEPOT if "O" in parts else ""
    if "C" in parts:
        notes += load_depot_demands(instance)
    return families, instance, notes


def load_depot_demands(instance: dict) -> str:
    """Moves a demand at a depot (DRoC's fleets start at customers) onto the one vehicle based there, as
    OR-Tools counts it: that vehicle's capacity is reduced by it (``instance`` is changed); returns what
    the description must say. A depot of several vehicles with a demand is refused (ValueError)."""
    notes, vehicle_depots = "", instance["vehicle_depots"]
    loaded = [v for v in instance["depots"] if instance["demand"][v]]
    if not loaded:
        return notes
    capacity = per_vehicle(instance["capacity"], len(vehicle_depots))
    for depot in loaded:
        based = [k for k, v in enumerate(vehicle_depots) if v == depot]
        if len(based) != 1:
            raise ValueError(f"demands at depot {depot}, the base of {len(based)} vehicles (whose load is it?)")
        demand, instance["demand"][depot] = instance["demand"][depot], 0
        capacity[based[0]] -= demand
        notes += (f" Node {depot} is vehicle {based[0]}'s depot and has a demand of {demand}, loaded on that "
                  f"vehicle: its capacity, {capacity[based[0]]}, is what is left for customers.")  # fmt: skip
    instance["capacity"] = capacity
    return notes


def code_parts(code: str) -> set[str] | None:
    """The parts of a DRoC problem code: ``PCVRPTWMD`` -> {PC, VRP, TW, MD}; ``OCVRPL`` -> {O, C, VRP,
    L}; None for a code not of DRoC's grammar ([PC][O][C] VRP | TSP | PDP, then TW, RC, MD, S, L)."""
    match = re.fullmatch(r"(PC)?(O)?(C)?(VRP|TSP|PDP)((?:TW|RC|MD|S|L)*)", code)
    if match is None:
        return None
    return {part for part in match.groups()[:4] if part} | set(re.findall(r"TW|RC|MD|S|L", match.group(5)))


GAP = 0.05  # DRoC's and our references further apart than this are checked against each other


def relaxations(families: list[str], instance: dict):
    """(what is left out, families, instance) for each stated constraint left out in turn: each
    family (``problems.relax``), the service in a time objective, the duration limit."""
    for family in families:
        if family != "tsp":
            yield (family, *relax(families, instance, family))
    if instance.get("objective") == "time" and "service_time" in families:
        yield "service in the objective", families, dict(instance, objective="distance")
    if "max_route_duration" in instance:
        yield "duration limit", families, {k: v for k, v in instance.items() if k != "max_route_duration"}


def ignored_constraints(families: list[str], instance: dict, published: float, seconds: float) -> list[str]:
    """The stated constraints whose omission explains a published value below ours: the problem
    without it (``relaxations``) solved to ``published`` or below, so the published value need not
    satisfy it. Where one is found the published value ignores a stated constraint, and ours stands."""
    ignored = []
    for what, fams, inst in relaxations(families, instance):
        relaxed = solve_reference(fams, inst, seconds)
        if relaxed is not None and relaxed["objective"] <= published:
            ignored.append(what)
    return ignored


def infeasible(families: list[str], instance: dict) -> str:
    """A proof that no solution exists, in words, where a simple bound gives one ('' otherwise): the
    demand beyond the fleet's capacity, or (without windows) the service plus the cheapest way into
    every customer beyond the fleet's working time."""
    vehicles, d = instance["num_vehicles"], instance["distance"]
    customers = [i for i in range(len(d)) if i not in instance["depots"]]
    if "capacity" in families and "pickup_delivery" not in families:
        fleet = sum(per_vehicle(instance["capacity"], vehicles))
        if (demand := sum(instance["demand"])) > fleet:
            return f"infeasible as stated: the demand {demand} exceeds the fleet's capacity {fleet}"
    if "max_route_duration" in instance and "time_windows" not in families:
        service = sum(instance["service_time"]) if "service_time" in families else 0
        into = sum(min(d[i][c] for i in range(len(d)) if i != c) for c in customers)
        if service + into > (fleet := vehicles * instance["max_route_duration"]):
            return (f"infeasible as stated: service {service} plus the cheapest way into each customer {into} = {service + into} "
                    f"exceed the fleet's {vehicles} x {instance['max_route_duration']} = {fleet}")
    return ""


def what_it_states(problem: dict) -> str:
    """The families and settings of a problem, in a few words: ``capacity, time_windows, duration limit``."""
    instance = problem["instance"]
    settings = [
        *(["duration limit"] if "max_route_duration" in instance else []),
        *(["departure window"] if instance.get("depot_window") == "departure" else []),
        *(["time objective"] if instance.get("objective") == "time" else []),
    ]
    return ", ".join(problem["families"] + settings) or "routes only"


def comparison(reference: dict) -> str:
    """DRoC's published value beside ours, and where they lie more than GAP apart, which is right."""
    published, ours = reference["published"], reference["objective"]
    if published is None:
        return ""
    differ = abs(ours - published) / abs(published)
    text = f"; DRoC's optimal {published:g}"
    if differ <= GAP:
        return text
    if ours < published:
        return text + f" (ours is {differ:.1%} lower and meets every stated constraint: DRoC's is not optimal)"
    if reference.get("published_ignores"):
        return text + (f" (ours is {differ:.1%} higher: DRoC's value is what the problem gives without its "
                       f"{', '.join(reference['published_ignores'])}; with it ours stands)")  # fmt: skip
    if reference.get("optimal"):
        return text + (f" (ours is {differ:.1%} higher and proven optimal: DRoC's value breaks a stated constraint "
                       "or solves another problem)")  # fmt: skip
    return text + f" (ours is {differ:.1%} higher, and no stated constraint left out explains it: check both)"


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description="Read DRoC's problems/*.py (never run) into our problem JSON files.")
    parser.add_argument("folder", help="a DRoC checkout's problems/ folder (or any folder of files in its layout)")
    parser.add_argument("--out", required=True, help="the folder to write one JSON problem file per mapped problem")
    parser.add_argument("--seconds", type=float, default=2.0, help="our reference solver's time per problem")
    parser.add_argument("--prove-seconds", type=float, default=10.0,
                        help="CP-SAT's time per problem to prove the reference optimal or the problem infeasible (0: none)")
    args = parser.parse_args(argv)
    folder, out = Path(args.folder), Path(args.out)
    if not folder.is_dir():
        sys.exit(f"error: {folder} is not a folder of DRoC problem files")
    if not 0.01 <= args.seconds <= 3600:
        sys.exit(f"error: --seconds must be in 0.01..3600, got {args.seconds}")
    if not 0 <= args.prove_seconds <= 3600:
        sys.exit(f"error: --prove-seconds must be in 0..3600, got {args.prove_seconds}")
    files = sorted(folder.glob("*.py"))
    if not files:
        sys.exit(f"error: {folder} holds no .py files")
    out.mkdir(parents=True, exist_ok=True)
    written, refused = 0, []
    for file in files:
        try:
            problem = droc_problem(file, args.seconds, args.prove_seconds)
        except DRoCError as exc:
            refused.append(str(exc))
            continue
        ref = problem["reference"]
        (out / f"{problem['name']}.json").write_text(json.dumps(problem))
        written += 1
        filled = "".join(f"; {k} read from the file (params_dict lacks it)" for k in ref.get("filled_from_file", []))
        print(f"{file.name}: {problem['name']} ({what_it_states(problem)}), our reference {ref['objective']:g}"
              f"{' (proven optimal)' if ref.get('optimal') else ''}{comparison(ref)}{filled}")  # fmt: skip
    for reason in refused:
        print(f"refused: {reason}")
    print(f"{written} of {len(files)} DRoC problems written to {out}; {len(refused)} refused (reasons above)")


if __name__ == "__main__":
    main()
