"""The checked schema of zerostart's --timeline JSON (as the bench JSON has
vmm/zerobench/tests/report.jq): every harness that reads a timeline checks
it here first, so a renamed key or a phase out of order fails by name
instead of reading as a missing number.

Two documents, both written by vmm/zerostart:
  run     `zerostart run --timeline` (src/main.rs write_timeline): phases,
          guest_phases, memory_bytes, vcpus, prezero (ram::Report),
          exit {reason, kind, code}
  launch  `zerostart launch --timeline` (src/launch/mod.rs): phases,
          guest_phases, vmm, boot (direct|uefi), hint_transport
          (fw_cfg|cmdline|none), argv, memory_bytes, memory_source, lease,
          hint, exit {code, signal}

guest_phases (src/phases.rs) are what the guest reported over vsock (port
5300, `zsphase: <name> uptime_ms=<n>`): [{name, host_ms, guest_uptime_ms}]
with name one of GUEST_PHASE_NAMES, host_ms from the same origin as phases;
[] without --vsock.

  check(doc, kind="run", phases=()) -> list of problems ([] when it conforms)
  python3 -m zstest.timeline run|launch FILE [PHASE...]   exit 1 and one line per problem
"""

from __future__ import annotations

import json
import sys

# key -> allowed types (bool is not an int here).
RUN = {
    "phases": list,
    "guest_phases": list,
    "memory_bytes": int,
    "vcpus": int,
    "prezero": dict,
    "exit": dict,
}
RUN_PREZERO = {
    "mode": str, "backend": (str, type(None)), "method": str, "backing": str, "bytes": int,
    "ms": (int, float), "gib_per_s": (int, float), "threads": int,
    "hint_ranges": int, "hint_bytes": int, "verified_bytes": int,
}
RUN_EXIT = {"reason": str, "kind": str, "code": int}
LAUNCH = {
    "phases": list,
    "guest_phases": list,
    "vmm": str,
    "boot": str,
    "hint_transport": str,
    "argv": list,
    "memory_bytes": int,
    "memory_source": str,
    "lease": (int, type(None)),
    "hint": (dict, type(None)),
    "exit": dict,
}
LAUNCH_EXIT = {"code": (int, type(None)), "signal": (int, type(None))}
LAUNCH_PHASES = ("process_start", "memory_ready", "hint_ready", "vmm_spawned", "exit")
GUEST_PHASE_NAMES = ("userspace_started", "network_up", "multi_user_reached", "app_ready")


def _typed(v, types) -> bool:
    types = types if isinstance(types, tuple) else (types,)
    if isinstance(v, bool):
        return bool in types
    return isinstance(v, types)


def _fields(doc: dict, spec: dict, where: str) -> list[str]:
    out = []
    for k, t in spec.items():
        if k not in doc:
            out.append(f"{where}{k} missing")
        elif not _typed(doc[k], t):
            out.append(f"{where}{k} is {type(doc[k]).__name__} {doc[k]!r:.60}")
    return out


def check_phases(phases: list, want: tuple | list = ()) -> list[str]:
    """Phases are [{name, t_ms}], process_start at 0 first, times in order,
    and every name of `want` present."""
    out = []
    if not phases:
        return ["phases is empty"]
    for i, p in enumerate(phases):
        if not isinstance(p, dict) or set(p) != {"name", "t_ms"}:
            out.append(f"phases[{i}] is not {{name, t_ms}}: {p!r:.80}")
        elif not isinstance(p["name"], str) or not p["name"]:
            out.append(f"phases[{i}].name is not a name: {p['name']!r}")
        elif not _typed(p["t_ms"], (int, float)) or p["t_ms"] < 0:
            out.append(f"phases[{i}].t_ms ({p['name']}) is not a time >= 0: {p['t_ms']!r}")
    if out:
        return out
    if phases[0] != {"name": "process_start", "t_ms": 0} and phases[0] != {"name": "process_start", "t_ms": 0.0}:
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
    """guest_phases are [{name, host_ms, guest_uptime_ms}], names known,
    host_ms >= 0 and in arrival order, guest_uptime_ms an int >= 0."""
    out = []
    for i, p in enumerate(guest):
        if not isinstance(p, dict) or set(p) != {"name", "host_ms", "guest_uptime_ms"}:
            out.append(f"guest_phases[{i}] is not {{name, host_ms, guest_uptime_ms}}: {p!r:.80}")
        elif p["name"] not in GUEST_PHASE_NAMES:
            out.append(f"guest_phases[{i}].name {p['name']!r} is not one of {GUEST_PHASE_NAMES}")
        elif not _typed(p["host_ms"], (int, float)) or p["host_ms"] < 0:
            out.append(f"guest_phases[{i}].host_ms is not a time >= 0: {p['host_ms']!r}")
        elif not _typed(p["guest_uptime_ms"], int) or p["guest_uptime_ms"] < 0:
            out.append(f"guest_phases[{i}].guest_uptime_ms is not an int >= 0: {p['guest_uptime_ms']!r}")
    if not out:
        t = [p["host_ms"] for p in guest]
        if t != sorted(t):
            out.append(f"guest_phases are not in arrival order: {[(p['name'], p['host_ms']) for p in guest]}")
    return out


def check(doc, kind: str = "run", phases: tuple | list = ()) -> list[str]:
    """Problems of a timeline document of `kind` ("run" or "launch"); [] when it conforms."""
    if not isinstance(doc, dict):
        return [f"the timeline is {type(doc).__name__}, not an object"]
    if kind == "run":
        out = _fields(doc, RUN, "")
        if isinstance(doc.get("prezero"), dict):
            out += _fields(doc["prezero"], RUN_PREZERO, "prezero.")
        if isinstance(doc.get("exit"), dict):
            out += _fields(doc["exit"], RUN_EXIT, "exit.")
        if _typed(doc.get("vcpus"), int) and doc["vcpus"] < 1:
            out.append(f"vcpus is {doc['vcpus']}")
    elif kind == "launch":
        out = _fields(doc, LAUNCH, "")
        if isinstance(doc.get("exit"), dict):
            out += _fields(doc["exit"], LAUNCH_EXIT, "exit.")
        if isinstance(doc.get("argv"), list) and not all(isinstance(a, str) for a in doc["argv"]):
            out.append("argv holds a non-string")
        phases = tuple(phases) or LAUNCH_PHASES
    else:
        raise ValueError(f"timeline kind {kind!r}: use run or launch")
    if _typed(doc.get("memory_bytes"), int) and doc["memory_bytes"] <= 0:
        out.append(f"memory_bytes is {doc['memory_bytes']}")
    if isinstance(doc.get("phases"), list):
        out += check_phases(doc["phases"], phases)
    if isinstance(doc.get("guest_phases"), list):
        out += check_guest_phases(doc["guest_phases"])
    return out


def main(argv: list[str]) -> int:
    if len(argv) < 2 or argv[0] not in ("run", "launch"):
        print("usage: python3 -m zstest.timeline run|launch FILE [PHASE...]", file=sys.stderr)
        return 2
    try:
        with open(argv[1]) as f:
            doc = json.load(f)
    except (OSError, json.JSONDecodeError) as e:
        print(f"timeline {argv[1]}: {e}", file=sys.stderr)
        return 1
    problems = check(doc, argv[0], argv[2:])
    for p in problems:
        print(f"timeline {argv[1]}: {p}", file=sys.stderr)
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
