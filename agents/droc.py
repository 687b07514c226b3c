"""DRoC's benchmark files (github.com/Summer142857/DRoC, ``problems/*.py``) read as they are, never run.

Each DRoC problem is a Python module of literal assignments: the matrix (``problem``), the
instance's parameters, ``params_dict`` naming what ``solve(...)`` receives, ``input`` (the problem's
name and the code example) and ``optimal``. ``read_droc`` parses a file with ``ast`` and evaluates
only literals, names assigned before, ``[x] * n``, ``len(name)`` and item assignments such as
``service_time[0] = 0``; anything else (a call, an import, an attribute) is refused with the line it
is on, so a file is data, never code.

``droc_problem`` maps a DRoC problem to our format (``agents/problems.py``) where its semantics are
ones our checker states: TSP, VRP with a fleet, capacities (per vehicle), distance limits, multiple
depots whose vehicles return to their start. The rest are refused with the semantics we cannot yet
say (open routes with a free start, time windows with a free departure and a span limit, service in
the objective, depot loading docks, pickup and delivery with capacity, prizes), and a problem whose
instance our loader refuses (a demand at a depot node) is refused with that reason, never changed
silently. The reference is recomputed with our solver; DRoC's published ``optimal`` is kept beside it.

    python -m ppoor.agents.droc DROC/problems --out droc_problems   # our JSON, one file per problem
    python eval_rlea.py --problems droc_problems --methods standard ...
"""

from __future__ import annotations

import argparse
import ast
import json
import re
import sys
from pathlib import Path

from ppoor.agents.problems import SIGNATURE, describe, instance_error, is_int, relax, solve_reference

SUPPORTED = {  # DRoC's problem code -> our families
    "TSP": ["tsp"],
    "VRP": [],
    "VRPL": ["distance_limit"],
    "CVRP": ["capacity"],
    "CVRPL": ["capacity", "distance_limit"],
    "VRPMD": ["multi_depot"],
    "CVRPMD": ["capacity", "multi_depot"],
    "CVRPMDL": ["capacity", "distance_limit", "multi_depot"],
}
UNSUPPORTED = {  # a part of DRoC's code (``code_parts``) -> what our format cannot say yet
    "O": "open routes with a free start and end (ours start at a depot)",
    "TW": "time windows with a free departure within the depot's window and the objective in time",
    "S": "service times with the objective as total time including service",
    "RC": "depot loading docks (loading / unloading times, a limit on vehicles served at once)",
    "PDP": "pickup and delivery as DRoC states it",
    "PC": "prize collecting as DRoC states it",
}


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
        if is_int(left) and is_int(right) and abs(left) <= 10**12 and abs(right) <= 10**12:
            if isinstance(node.op, ast.FloorDiv) and right == 0:
                raise DRoCError(f"{path}:{node.lineno}: division by zero")
            ops = {ast.Mult: int.__mul__, ast.Add: int.__add__, ast.Sub: int.__sub__, ast.FloorDiv: int.__floordiv__}
            return ops[type(node.op)](left, right)
    if (isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "len"
            and len(node.args) == 1 and not node.keywords):  # fmt: skip
        return len(literal(node.args[0], names, path))
    raise DRoCError(f"{path}:{node.lineno}: {ast.unparse(node)[:60]!r} is not plain data (not evaluated)")


def problem_code(names: dict, path: Path) -> str:
    """DRoC's code of a problem (``CVRPTW``), from ``input['problem']`` ("... (CVRPTW)") or the file name."""
    title = names.get("input", {}).get("problem", "") if isinstance(names.get("input"), dict) else ""
    if "(" in title and title.rstrip().endswith(")"):
        return title.rsplit("(", 1)[1].rstrip(" )").upper()
    return path.stem.upper()


def droc_problem(path: str | Path, seconds: float = 2.0) -> dict:
    """Our problem (name, families, description, signature, instance, reference) for a DRoC file;
    DRoCError with the reason where its semantics or instance cannot be stated in our format."""
    path = Path(path)
    try:
        names = read_droc(path)
    except DRoCError as exc:  # say first what the format lacks, where the file's name tells
        if (stem := path.stem.upper()) not in SUPPORTED and (missing := unsupported(stem)):
            raise DRoCError(f"{path.name} ({stem}): not yet in our format: {missing} (and {exc})") from None
        raise
    code = problem_code(names, path)
    if code not in SUPPORTED:
        raise DRoCError(f"{path.name} ({code}): not yet in our format: {unsupported(code) or 'an unknown variant'}")
    params = names.get("params_dict")
    if not isinstance(params, dict):
        raise DRoCError(f"{path.name}: no params_dict (the arguments of solve)")
    # without windows or service, travel time is the only cost: a time matrix and a duration limit are
    # a distance matrix and a route-length limit
    matrix = params.get("distance_matrix", params.get("time_matrix"))
    if matrix is None:
        raise DRoCError(f"{path.name}: params_dict has no distance_matrix (or time_matrix)")
    families = SUPPORTED[code]
    n = len(matrix)
    if "starts" in params or "ends" in params:
        starts, ends = params.get("starts"), params.get("ends")
        if starts != ends:
            raise DRoCError(f"{path.name} ({code}): vehicles end elsewhere than they start (not yet in our format)")
        vehicle_depots = list(starts)
    else:
        vehicle_depots = [params.get("depot", 0)] * (1 if code == "TSP" else params.get("num_vehicle", 1))
    instance = {
        "distance": matrix,
        "depots": sorted(set(vehicle_depots)),
        "num_vehicles": len(vehicle_depots),
        "vehicle_depots": vehicle_depots,
    }
    if "capacity" in families:
        instance["demand"] = params.get("demands")
        capacities = params.get("vehicle_capacities", params.get("vehicle_capacity"))
        instance["capacity"] = (
            capacities[0] if isinstance(capacities, list) and len(set(capacities)) == 1 else capacities
        )
    if "distance_limit" in families:
        instance["max_route_distance"] = params.get("distance_limit", params.get("duration_limit"))
    if error := instance_error(instance, families):
        raise DRoCError(f"{path.name} ({code}): {error}")
    if n < 2:
        raise DRoCError(f"{path.name}: a matrix of {n} node(s)")
    answer = solve_reference(families, instance, seconds)
    if answer is None:
        raise DRoCError(f"{path.name} ({code}): our solver found no solution in {seconds:g} s")
    published = names.get("optimal")
    answer["published"] = published if isinstance(published, int | float) else None
    if answer["published"] and abs(answer["objective"] - published) > GAP * abs(published):
        answer["published_ignores"] = ignored_constraints(families, instance, published, seconds)
    return {
        "name": f"droc-{code.lower()}",
        "families": families,
        "split": "test",
        "description": describe(families, instance),
        "signature": SIGNATURE,
        "instance": instance,
        "reference": answer,
    }


def code_parts(code: str) -> set[str] | None:
    """The parts of a DRoC problem code: ``PCVRPTWMD`` -> {PC, VRP, TW, MD}; ``OCVRPL`` -> {O, C, VRP,
    L}; None for a code not of DRoC's grammar ([PC][O][C] VRP | TSP | PDP, then TW, RC, MD, S, L)."""
    match = re.fullmatch(r"(PC)?(O)?(C)?(VRP|TSP|PDP)((?:TW|RC|MD|S|L)*)", code)
    if match is None:
        return None
    return {part for part in match.groups()[:4] if part} | set(re.findall(r"TW|RC|MD|S|L", match.group(5)))


def unsupported(code: str) -> str:
    """What our format cannot say yet of a DRoC problem code ('' when nothing is known of it)."""
    parts = code_parts(code) or set()
    return "; ".join(why for part, why in UNSUPPORTED.items() if part in parts)


GAP = 0.05  # DRoC's and our references further apart than this are checked against each other


def ignored_constraints(families: list[str], instance: dict, published: float, seconds: float) -> list[str]:
    """The constraint families whose omission explains a published value below ours: the problem
    without that family (``problems.relax``) solved to ``published`` or below (so the published
    value need not satisfy it). Where one is found the published value ignores a stated constraint,
    and ours stands."""
    ignored = []
    for family in families:
        if family == "tsp":
            continue
        fams, inst = relax(families, instance, family)
        relaxed = solve_reference(fams, inst, seconds)
        if relaxed is not None and relaxed["objective"] <= published:
            ignored.append(family)
    return ignored


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description="Read DRoC's problems/*.py (never run) into our problem JSON files.")
    parser.add_argument("folder", help="a DRoC checkout's problems/ folder (or any folder of files in its layout)")
    parser.add_argument("--out", required=True, help="the folder to write one JSON problem file per mapped problem")
    parser.add_argument("--seconds", type=float, default=2.0, help="our reference solver's time per problem")
    args = parser.parse_args(argv)
    folder, out = Path(args.folder), Path(args.out)
    if not folder.is_dir():
        sys.exit(f"error: {folder} is not a folder of DRoC problem files")
    if not 0.01 <= args.seconds <= 3600:
        sys.exit(f"error: --seconds must be in 0.01..3600, got {args.seconds}")
    files = sorted(folder.glob("*.py"))
    if not files:
        sys.exit(f"error: {folder} holds no .py files")
    out.mkdir(parents=True, exist_ok=True)
    written, refused = 0, []
    for file in files:
        try:
            problem = droc_problem(file, args.seconds)
        except DRoCError as exc:
            refused.append(str(exc))
            continue
        ref = problem["reference"]
        (out / f"{problem['name']}.json").write_text(json.dumps(problem))
        written += 1
        mark = ""
        if ref["published"]:
            differ = abs(ref["objective"] - ref["published"]) / abs(ref["published"])
            mark = f"; DRoC's optimal {ref['published']:g}"
            if differ > GAP and ref.get("published_ignores"):
                mark += (
                    f" ({differ:.1%} apart: DRoC's value is what the problem gives without its "
                    f"{', '.join(ref['published_ignores'])}; with it ours stands)"
                )
            elif differ > GAP:
                mark += f" ({differ:.1%} apart: neither explained, check both)"
        print(f"{file.name}: {problem['name']} ({', '.join(problem['families']) or 'routes only'}), our reference "
              f"{ref['objective']:g}{' (proven optimal)' if ref.get('optimal') else ''}{mark}")  # fmt: skip
    for reason in refused:
        print(f"refused: {reason}")
    print(f"{written} of {len(files)} DRoC problems written to {out}; {len(refused)} refused (reasons above)")


if __name__ == "__main__":
    main()
