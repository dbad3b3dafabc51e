"""The checked schema of zerostart's --timeline JSON: every harness that
reads a timeline checks it here first, so a renamed key or a phase out of
order fails by name instead of reading as a missing number.

The shape is not restated here. The documents are Rust types (vmm/timeline:
RunTimeline for `zerostart run --timeline`, LaunchTimeline for `zerostart
launch --timeline`), and their JSON Schemas are generated from them into
docs/schema/timeline-{run,launch}.schema.json (a cargo test fails while the
committed files differ). This module validates against those files with the
`jsonschema` package (python3-jsonschema, `make deps`) and adds what a
schema cannot say:

  - the first phase is process_start at 0, and phase times are in order;
  - every phase the caller asks for is present (a launch: LAUNCH_PHASES);
  - guest_phases (what the guest reported over vsock, port 5300) are in
    arrival order.

  check(doc, kind="run", phases=()) -> list of problems ([] when it conforms)
  python3 -m zstest.timeline run|launch FILE [PHASE...]   exit 1 and one line per problem
"""

from __future__ import annotations

import functools
import json
import sys
from pathlib import Path

SCHEMA_DIR = Path(__file__).resolve().parent.parent.parent / "docs" / "schema"
KINDS = ("run", "launch")
# The phases every launch timeline has (vmm/zerostart/src/launch/mod.rs).
LAUNCH_PHASES = ("process_start", "memory_ready", "hint_ready", "vmm_spawned", "exit")


@functools.cache
def validator(kind: str):
    """The jsonschema validator of docs/schema/timeline-KIND.schema.json."""
    try:
        import jsonschema.validators
    except ImportError as e:
        raise RuntimeError("zstest.timeline needs the Python jsonschema package; "
                           "install python3-jsonschema (`make deps`)") from e
    path = SCHEMA_DIR / f"timeline-{kind}.schema.json"
    with open(path) as f:
        schema = json.load(f)
    cls = jsonschema.validators.validator_for(schema)
    cls.check_schema(schema)
    return cls(schema)


def _where(path) -> str:
    """`phases[1].t_ms` for the path deque ('phases', 1, 't_ms')."""
    out = ""
    for p in path:
        out += f"[{p}]" if isinstance(p, int) else (f".{p}" if out else str(p))
    return out


def _branch(e):
    """The errors of the one anyOf/oneOf branch whose type the value has
    (a set `hint` is checked against its object schema, not against
    `null`); None when that is not one branch."""
    by_branch: dict = {}
    for c in e.context:
        by_branch.setdefault(c.relative_schema_path[0], []).append(c)
    fits = [errs for errs in by_branch.values()
            if not any(c.validator == "type" and len(c.relative_path) == 0 for c in errs)]
    return fits[0] if len(fits) == 1 else None


def _problem(e) -> list[str]:
    """One error of the schema as lines that name the key."""
    where, v = _where(e.absolute_path), e.instance
    prefix = f"{where}." if where else ""
    if e.validator == "required":
        return [f"{prefix}{k} missing" for k in e.validator_value if k not in v]
    if e.validator == "type":
        return [f"{where} is {type(v).__name__} {v!r:.60}"]
    if e.validator == "minimum":
        return [f"{where} is {v!r}, below the minimum {e.validator_value}"]
    if e.validator == "minItems" and not v:
        return [f"{where} is empty"]
    if e.validator == "additionalProperties":
        extra = sorted(set(v) - set(e.schema.get("properties", {})))
        return [f"{where} has unknown key(s) {extra}; expected {{{', '.join(e.schema.get('properties', {}))}}}"]
    if e.validator in ("oneOf", "anyOf"):
        consts = [s.get("const") for s in e.validator_value]
        if all(c is not None for c in consts):
            return [f"{where} {v!r} is not one of {tuple(consts)}"]
        branch = _branch(e)
        if branch is not None:
            return [p for c in branch for p in _problem(c)]
        if all(c.validator == "type" for c in e.context):
            return [f"{where} is {type(v).__name__} {v!r:.60}"]
    return [f"{where or 'the timeline'}: {e.message:.120}"]


def _schema(doc, kind: str) -> tuple[list[str], set]:
    """What docs/schema/timeline-KIND.schema.json rejects in `doc`, one
    line per problem naming its key, and the top-level keys at fault."""
    out: list[str] = []
    bad = set()
    for e in validator(kind).iter_errors(doc):
        if e.absolute_path:
            bad.add(e.absolute_path[0])
        elif e.validator == "required":
            bad.update(k for k in e.validator_value if k not in doc)
        for p in _problem(e):
            if p not in out:
                out.append(p)
    return out, bad


def schema_problems(doc, kind: str) -> list[str]:
    """What docs/schema/timeline-KIND.schema.json rejects in `doc`, one
    line per problem, each naming its key."""
    return _schema(doc, kind)[0]


def check_phases(phases: list, want: tuple | list = ()) -> list[str]:
    """Well-formed phases ([{name, t_ms}], which the schema checks) start
    with process_start at 0, are in time order, and hold every name of
    `want`."""
    out = []
    if phases[0] != {"name": "process_start", "t_ms": 0}:
        out.append(f"the first phase is not process_start at 0: {phases[0]}")
    t = [p["t_ms"] for p in phases]
    if t != sorted(t):
        out.append(f"phase times are not in order: {[(p['name'], p['t_ms']) for p in phases]}")
    names = [p["name"] for p in phases]
    missing = [n for n in want if n not in names]
    if missing:
        out.append(f"phases {missing} missing (has {names})")
    return out


def check_guest_phases(guest: list) -> list[str]:
    """Well-formed guest_phases ([{name, host_ms, guest_uptime_ms}], which
    the schema checks) are in arrival order."""
    t = [p["host_ms"] for p in guest]
    if t != sorted(t):
        return [f"guest_phases are not in arrival order: {[(p['name'], p['host_ms']) for p in guest]}"]
    return []


def check(doc, kind: str = "run", phases: tuple | list = ()) -> list[str]:
    """Problems of a timeline document of `kind` ("run" or "launch"); [] when it conforms."""
    if kind not in KINDS:
        raise ValueError(f"timeline kind {kind!r}: use run or launch")
    if not isinstance(doc, dict):
        return [f"the timeline is {type(doc).__name__}, not an object"]
    out, bad = _schema(doc, kind)
    if kind == "launch":
        phases = tuple(phases) or LAUNCH_PHASES
    # The checks a schema cannot say, on the lists it found well-formed.
    if "phases" not in bad:
        out += check_phases(doc["phases"], phases)
    if "guest_phases" not in bad:
        out += check_guest_phases(doc["guest_phases"])
    return out


def main(argv: list[str]) -> int:
    if len(argv) < 2 or argv[0] not in KINDS:
        print("usage: python3 -m zstest.timeline run|launch FILE [PHASE...]", file=sys.stderr)
        return 2
    try:
        with open(argv[1]) as f:
            doc = json.load(f)
        problems = check(doc, argv[0], argv[2:])
    except (OSError, json.JSONDecodeError, RuntimeError) as e:
        print(f"timeline {argv[1]}: {e}", file=sys.stderr)
        return 1
    for p in problems:
        print(f"timeline {argv[1]}: {p}", file=sys.stderr)
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
