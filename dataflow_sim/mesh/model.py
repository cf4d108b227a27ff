"""The mesh cost model: phases of XY-routed messages and per-core compute on a 2-D mesh.

Every algorithm in this package is a list of :class:`Phase` objects. A phase is a batch of
messages (:class:`Flows`) released together, plus per-core compute. The model's conventions are
deliberately simple, so that an RTL mesh can be built to meet them cycle for cycle:

* **Routing.** Dimension-order XY: a message first travels along its source row to the
  destination column, then along that column to the destination row. ``hops = |dc-sc| + |dr-sr|``.
  Links are directed; each direction of each link carries ``link_bytes_per_cycle`` bytes per cycle.
* **Flits.** A message of B bytes is ``W = ceil(B / link_bytes_per_cycle)`` flits.
* **Latency.** Uncontended, a message's last flit is delivered
  ``alpha * hops + beta * stages + W`` cycles after its first flit leaves the source
  (cut-through / wormhole; ``alpha = hop_latency_cycles``, ``beta = routing_stage_cycles``).
  ``stages`` counts the cores whose processor handles the message (the receiver of a plain
  message: 1; a streaming chain-reduction through L cores: L). Hardware transit does not count.
* **Contention.** Flows of one phase that share a directed link serialize on it. A phase's
  communication time is ``max_f(alpha*hops_f + beta*stages_f) + max_l(flits on link l)``:
  the worst latency plus the worst link's total flits. This is exact for one flow, for flows that
  share their whole path, and for flows that merge into the path of the longest-latency flow
  when none of them can cross a shared link before that flow's flits reach it (e.g. two messages
  along a row into one core, the nearer one starting on the far one's path; the RTL mesh checks
  these cycle for cycle). Otherwise it is an upper bound: a short message that can cross a
  shared link before a longer one arrives, or interleave with it (the RTL's round-robin
  routers let it), costs less; :mod:`.flit_sim` gives the exact figure for the RTL.
  Multicast (a broadcast along a line) is one flow whose flits cross every link of the line once.
* **Compute.** A core doing ``m`` MACs is busy ``ceil(m / core_macs_per_cycle)`` cycles.
* **Phases.** A phase starts when the previous one has finished everywhere (a zero-cost global
  barrier). Its time is ``max(comm, compute)`` when it overlaps communication with compute
  (double-buffered steps), else ``comm + compute``; ``ceil`` to whole cycles. A phase with
  ``repeat = n`` costs n times its single-run time.
* **Relay waves.** A phase followed by ``relay_wave`` phases (messages rerouted around defects:
  each wave leaves when the previous has arrived, relay cores store and forward) is one step
  whose communication is the chain ``comm_0 + comm_1 + ...``: it costs ``max(chain, compute)``
  when it overlaps (relays forward while the step computes), else ``chain + compute``. Each
  wave's reported cycles are what it adds to the step (0 when hidden under compute). The RTL
  mesh does not run detours (it checks defect-free meshes).
* **Spares.** On a mesh with spare rows/columns (``MeshSpec.repairs_defects``) the schedule runs
  on the intact logical grid the hardware repairs (:mod:`tilewright.compiler.mesh_repair`); flows
  and per-core arrays are in logical coordinates, and every message's latency gains
  ``alpha x`` its extra physical hops (bypassed dead cores/rows, displaced columns).
* **Routes.** A core's route count in a phase is the number of flows whose path touches it
  (source, transit or destination); route tables may be rewritten between phases, so the limit
  ``max_routes_per_core`` applies per phase.

Cycle counts are whole cycles from the first cycle of the first phase to the cycle after the last
flit of the last phase (i.e. a count, not the index of the last cycle).

The RTL mesh (``tilewright.rtl.mesh``, checked in ``tests/test_mesh_rtl.py`` and
``tests/test_mesh_arbitration.py``) runs the same mesh Program (``tilewright.compiler.mesh_ops``)
with ``alpha`` registers per hop and ``beta`` eject registers (whole numbers); its routers
arbitrate at run time (round-robin per output, credit flow control). Its behaviour is predicted
flit for flit by :mod:`.flit_sim` (the same rule in Python, for RTL-sized meshes); it meets the
rules above cycle for cycle where they are exact — MeshGEMV (1- and 2-level K-tree), MeshGEMM,
Cannon and SUMMA on a 4x4 mesh, messages sharing their whole path, streaming chain reductions
whose every core passed is a stage (``stages = hops``) — and finishes sooner where the
contention rule is an upper bound (round-robin lets a message use a shared link before or
between another's flits).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field


import numpy as np

from tilewright.arch import ArchSpec, MeshSpec
from tilewright.compiler.errors import MeshMappingError  # re-exported (the compiler raises it)
from tilewright.compiler.mesh_repair import repair
from tilewright.compiler.mesh_schedule import MessageBatch
from tilewright.compiler.mesh_schedule import route_counts as _route_counts

__all__ = ["MeshMappingError", "Flows", "Phase", "PhaseCost", "MeshReport", "simulate",
           "message_cycles", "DIRECTIONS"]

#: directed link sets: name -> (axis of travel, sign). E: (r,c)->(r,c+1) stored at [r, c];
#: W: (r,c+1)->(r,c) at [r, c]; S: (r,c)->(r+1,c) at [r, c]; N: (r+1,c)->(r,c) at [r, c].
DIRECTIONS = ("E", "W", "S", "N")


def message_cycles(mesh: MeshSpec, nbytes: int, hops: int, stages: int = 1) -> int:
    """Closed form for one uncontended message: ``alpha*hops + beta*stages + ceil(B/bw)``."""
    w = -(-int(nbytes) // mesh.link_bytes_per_cycle)
    return math.ceil(mesh.hop_latency_cycles * hops + mesh.routing_stage_cycles * stages + w)


@dataclass(frozen=True)
class Flows(MessageBatch):
    """A :class:`~tilewright.compiler.mesh_schedule.MessageBatch` with ``flits`` per message
    (see module doc for ``stages``); ``times`` only changes the link-load totals (a phase's time
    is set by its busiest repeat, where every flow runs)."""

    sr: np.ndarray
    sc: np.ndarray
    dr: np.ndarray
    dc: np.ndarray
    flits: np.ndarray
    stages: np.ndarray
    times: np.ndarray


@dataclass
class Phase:
    """One bulk-synchronous step: messages plus compute.

    ``macs``: MACs per core, a scalar for every core of ``cores`` (the schedule's active cores)
    or an (rows, cols) array. ``overlap``: compute overlaps communication (double buffering).
    ``repeat``: the phase runs this many times back to back (same flows, new data).
    ``route_group``: phases of one group are translations of one another (e.g. SUMMA's
    broadcast from root column k); route ids are counted on its first, middle and last member
    only (the per-core route map is exact for those, the limit check exact for all).
    ``relay_wave``: a message-only phase that is the next store-and-forward wave of the previous
    phase's rerouted messages (``route`` defect policy): see "Relay waves" in the module doc.
    """

    name: str
    flows: Flows | None = None
    macs: float | np.ndarray = 0.0
    overlap: bool = False
    repeat: int = 1
    route_group: str | None = None
    relay_wave: bool = False


@dataclass
class PhaseCost:
    name: str
    repeat: int
    flows: int
    latency_cycles: float     # max over flows of alpha*hops + beta*stages
    serialization_cycles: int  # max over directed links of flits carried
    compute_cycles: int       # max over cores
    cycles: int               # one run of the phase
    total_cycles: int         # cycles * repeat


@dataclass
class MeshReport:
    """What a mesh run predicts. Arrays are per physical core / directed link (see DIRECTIONS)."""

    op: str
    algo: str
    shape: dict
    arch: str
    clock_mhz: float
    cycles: int
    phases: list[PhaseCost]
    useful_macs: int
    cores_used: int
    link_load_flits: dict[str, np.ndarray]
    core_busy_cycles: np.ndarray
    memory_bytes: np.ndarray
    routes_per_core: np.ndarray
    notes: dict = field(default_factory=dict)

    @property
    def us(self) -> float:
        return self.cycles / self.clock_mhz

    @property
    def link_utilization(self) -> dict[str, np.ndarray]:
        """Per directed link: flits carried / cycles of the whole run (0..1)."""
        c = max(self.cycles, 1)
        return {d: a / c for d, a in self.link_load_flits.items()}

    @property
    def core_utilization(self) -> np.ndarray:
        """Per core: compute-busy cycles / cycles of the whole run (0..1)."""
        return self.core_busy_cycles / max(self.cycles, 1)

    def compute_efficiency(self, macs_per_cycle: int) -> float:
        """Useful MACs / (cycles x cores used x MACs per core-cycle); padding counts as waste."""
        return self.useful_macs / max(self.cycles * self.cores_used * macs_per_cycle, 1)

    def link_heatmap(self, kind: str = "horizontal") -> np.ndarray:
        """(rows, cols) map of link utilization summed over the two directions of each link
        leaving a core eastward (``horizontal``) or southward (``vertical``); edge = 0."""
        u = self.link_utilization
        r, c = self.core_busy_cycles.shape
        out = np.zeros((r, c))
        if kind == "horizontal" and c > 1:
            out[:, :-1] = u["E"] + u["W"]
        elif kind == "vertical" and r > 1:
            out[:-1, :] = u["S"] + u["N"]
        return out

    def summary(self) -> dict:
        """Plain scalars (JSON-able)."""
        loads = [a for a in self.link_load_flits.values() if a.size]
        busy = self.core_busy_cycles
        used = busy > 0
        mx = max((a.max() for a in loads), default=0)
        tot = sum(float(a.sum()) for a in loads)
        nlinks = sum(a.size for a in loads)
        return {
            "op": self.op, "algo": self.algo, **self.shape, "arch": self.arch,
            "cycles": int(self.cycles), "us": round(self.us, 6),
            "cores_used": int(self.cores_used), "useful_macs": int(self.useful_macs),
            "core_utilization_mean": round(float(busy[used].mean() / max(self.cycles, 1)), 6)
            if used.any() else 0.0,
            "link_utilization_max": round(float(mx / max(self.cycles, 1)), 6),
            "link_utilization_mean": round(tot / max(nlinks, 1) / max(self.cycles, 1), 6),
            "memory_bytes_max": int(self.memory_bytes.max()),
            "routes_per_core_max": int(self.routes_per_core.max()),
            "phases": [dict(name=p.name, repeat=p.repeat, cycles=p.cycles,
                            total_cycles=p.total_cycles) for p in self.phases],
            **self.notes,
        }

    def phase_table(self):
        """Per-phase costs as a pandas DataFrame."""
        import pandas as pd  # noqa: PLC0415  (lazy: pandas is heavy)
        return pd.DataFrame([p.__dict__ for p in self.phases])


# ---- link loads -----------------------------------------------------------------------------

def _segments(f: Flows, rows: int, cols: int, repeat: int = 1):
    """Per direction: (line, lo, hi, flits, flits x times) arrays; links lo..hi-1 of a line."""
    out = {}
    tot = f.flits * np.where(f.times < 0, repeat, f.times)
    h = f.dc != f.sc
    east = h & (f.dc > f.sc)
    west = h & (f.dc < f.sc)
    out["E"] = (f.sr[east], f.sc[east], f.dc[east], f.flits[east], tot[east])
    out["W"] = (f.sr[west], f.dc[west], f.sc[west], f.flits[west], tot[west])
    v = f.dr != f.sr
    south = v & (f.dr > f.sr)
    north = v & (f.dr < f.sr)
    out["S"] = (f.dc[south], f.sr[south], f.dr[south], f.flits[south], tot[south])
    out["N"] = (f.dc[north], f.dr[north], f.sr[north], f.flits[north], tot[north])
    return out


def _line_len(d: str, rows: int, cols: int) -> tuple[int, int]:
    """(number of lines, positions per line incl. one past the last link) for direction d."""
    return (rows, cols) if d in ("E", "W") else (cols, rows)


def _max_link_load(segs, rows: int, cols: int) -> int:
    """Max flits on any directed link: a sort of segment endpoints for few flows, dense
    difference arrays (bincount + cumsum per direction) for many."""
    nseg = sum(segs[d][0].size for d in DIRECTIONS)
    if nseg * 8 > rows * cols:
        best = 0
        for d in DIRECTIONS:
            line, lo, hi, w, _ = segs[d]
            if line.size == 0:
                continue
            nl, pos = _line_len(d, rows, cols)
            acc = (np.bincount(line * pos + lo, w, minlength=nl * pos)
                   - np.bincount(line * pos + hi, w, minlength=nl * pos))
            best = max(best, int(np.rint(np.cumsum(acc.reshape(nl, pos), axis=1).max())))
        return best
    keys, ws = [], []
    off = 0
    for d in DIRECTIONS:
        line, lo, hi, w, _ = segs[d]
        nl, pos = _line_len(d, rows, cols)
        base = off + line * pos
        keys += [base + lo, base + hi]
        ws += [w, -w]
        off += nl * pos
    k = np.concatenate(keys)
    if k.size == 0:
        return 0
    w = np.concatenate(ws)
    order = np.argsort(k, kind="stable")
    ks = k[order]
    cs = np.cumsum(w[order])
    last = np.empty(ks.shape, bool)
    last[:-1] = ks[1:] != ks[:-1]
    last[-1] = True
    return int(cs[last].max())


class _DenseLinks:
    """Accumulates total flits per directed link over all phases (one bincount at the end)."""

    def __init__(self, rows: int, cols: int):
        self.rows, self.cols = rows, cols
        self.keys = {d: [] for d in DIRECTIONS}
        self.ws = {d: [] for d in DIRECTIONS}

    def add(self, segs) -> None:
        for d in DIRECTIONS:
            line, lo, hi, _, wt = segs[d]
            if line.size == 0:
                continue
            _, pos = _line_len(d, self.rows, self.cols)
            self.keys[d] += [line * pos + lo, line * pos + hi]
            self.ws[d] += [wt, -wt]

    def arrays(self) -> dict[str, np.ndarray]:
        out = {}
        for d in DIRECTIONS:
            nl, pos = _line_len(d, self.rows, self.cols)
            if self.keys[d]:
                acc = np.bincount(np.concatenate(self.keys[d]), np.concatenate(self.ws[d]),
                                  minlength=nl * pos).reshape(nl, pos)
                load = np.cumsum(acc, axis=1)[:, :-1]
            else:
                load = np.zeros((nl, pos - 1))
            load = np.rint(load).astype(np.int64)
            out[d] = load if d in ("E", "W") else load.T.copy()   # S/N stored as [row, col]
        return out


# ---- the run --------------------------------------------------------------------------------

def simulate(arch: ArchSpec, phases: list[Phase], *, op: str, algo: str, shape: dict,
             cores: np.ndarray, memory_bytes: np.ndarray, useful_macs: int,
             notes: dict | None = None) -> MeshReport:
    """Cost ``phases`` on ``arch.mesh``; check SRAM, route and defect limits.

    ``cores``: bool (rows, cols) mask of the cores the schedule uses (scalar ``macs`` apply to
    them); ``memory_bytes``: per-core peak bytes the schedule keeps in SRAM.
    """
    mesh = arch.mesh
    if mesh is None:
        raise MeshMappingError(f"{arch.name}: the ArchSpec has no mesh section")
    rows, cols = mesh.rows, mesh.cols
    sram = mesh.core_sram_kib * 1024
    peak = float(memory_bytes.max()) if memory_bytes.size else 0.0
    if peak > sram:
        r, c = np.unravel_index(int(np.argmax(memory_bytes)), memory_bytes.shape)
        raise MeshMappingError(
            f"{algo} {op} {_shape_text(shape)}: needs {peak / 1024:.2f} KiB per core (core "
            f"({r}, {c}); {notes.get('memory_breakdown', '') if notes else ''}) but "
            f"core_sram_kib = {mesh.core_sram_kib:g}")
    alpha, beta = mesh.hop_latency_cycles, mesh.routing_stage_cycles
    fix = repair(mesh) if mesh.repairs_defects else None
    mpc = mesh.core_macs_per_cycle
    dense = _DenseLinks(rows, cols)
    busy = np.zeros((rows, cols), np.int64)
    scalar_busy = 0
    routes = np.zeros((rows, cols), np.int32)
    costs: list[PhaseCost] = []
    total = 0
    step = None          # [comm chain, compute, overlap, time, repeat] of the current step
    groups: dict[str, list[int]] = {}
    for i, ph in enumerate(phases):
        if ph.route_group is not None:
            groups.setdefault(ph.route_group, []).append(i)
    skip_routes = set()
    for members in groups.values():
        keep = {members[0], members[len(members) // 2], members[-1]}
        skip_routes.update(m for m in members if m not in keep)
    for i, ph in enumerate(phases):
        f = ph.flows
        if f is not None and len(f):
            segs = _segments(f, rows, cols, ph.repeat)
            hops = f.hops
            if fix is not None:
                _check_logical(fix, f, algo)
                hops = hops + fix.extra_hops(f.sr, f.sc, f.dr, f.dc)
            lat = float((alpha * hops + beta * f.stages).max())
            ser = _max_link_load(segs, rows, cols)
            dense.add(segs)
            if i not in skip_routes:
                np.maximum(routes, _route_counts(f, rows, cols), out=routes)
            nflows = len(f)
        else:
            lat, ser, nflows = 0.0, 0, 0
        if np.ndim(ph.macs) == 0:
            comp = -(-int(math.ceil(float(ph.macs))) // mpc)
            scalar_busy += comp * ph.repeat
        else:
            cc = -(-np.ceil(ph.macs).astype(np.int64) // mpc)
            comp = int(cc.max())
            busy += cc * ph.repeat
        comm = math.ceil(lat + ser) if nflows else 0
        if ph.relay_wave and step is not None and step[4] == ph.repeat and not comp:
            step[0] += comm
            new = max(step[0], step[1]) if step[2] else step[0] + step[1]
            one, step[3] = new - step[3], new
        else:
            one = max(comm, comp) if ph.overlap else comm + comp
            step = [comm, comp, ph.overlap, one, ph.repeat]
        costs.append(PhaseCost(ph.name, ph.repeat, nflows, lat, ser, comp, one, one * ph.repeat))
        total += one * ph.repeat
    busy = busy + scalar_busy * cores
    limit = mesh.max_routes_per_core
    if routes.max() > limit:
        r, c = np.unravel_index(int(np.argmax(routes)), routes.shape)
        raise MeshMappingError(
            f"{algo} {op} {_shape_text(shape)}: core ({r}, {c}) needs {int(routes.max())} route "
            f"ids in one phase but max_routes_per_core = {limit}")
    links = dense.arrays()
    if fix is None:
        _check_defects(mesh, links, routes, busy, algo)
    else:
        _check_logical_cores(fix, routes, busy, algo)
        notes = {**(notes or {}), **fix.summary()}
    return MeshReport(op=op, algo=algo, shape=shape, arch=arch.name, clock_mhz=arch.clock_mhz,
                      cycles=int(total), phases=costs, useful_macs=int(useful_macs),
                      cores_used=int(cores.sum()), link_load_flits=links, core_busy_cycles=busy,
                      memory_bytes=memory_bytes, routes_per_core=routes, notes=dict(notes or {}))


def _shape_text(shape: dict) -> str:
    return "x".join(f"{k}={v}" for k, v in shape.items())


def _check_logical(fix, f: Flows, algo: str) -> None:
    """On a repaired fabric every message must stay inside the logical grid."""
    nr, nc = fix.shape
    bad = (np.maximum(f.sr, f.dr) >= nr) | (np.maximum(f.sc, f.dc) >= nc)
    if bad.any():
        i = int(np.argmax(bad))
        raise MeshMappingError(f"{algo}: message ({f.sr[i]}, {f.sc[i]}) -> ({f.dr[i]}, {f.dc[i]}) "
                               f"leaves the {nr}x{nc} logical grid the spares repair")


def _check_logical_cores(fix, routes, busy, algo: str) -> None:
    """No core outside the repaired logical grid computes or routes (the schedule is in
    logical coordinates; cores past the grid stand for spares and dead cores)."""
    nr, nc = fix.shape
    used = (routes > 0) | (busy > 0)
    used[:nr, :nc] = False
    if used.any():
        r, c = np.unravel_index(int(np.argmax(used)), used.shape)
        raise MeshMappingError(f"{algo}: schedule uses core ({r}, {c}) outside the {nr}x{nc} "
                               "logical grid the spares repair")


def _check_defects(mesh: MeshSpec, links, routes, busy, algo: str) -> None:
    for (r, c) in mesh.defective_cores:
        if routes[r, c] or busy[r, c]:
            raise MeshMappingError(f"{algo}: schedule uses dead core ({r}, {c})")
    for a, b in mesh.defective_links:
        (r0, c0), (r1, c1) = sorted((tuple(a), tuple(b)))
        if r0 == r1 and c1 == c0 + 1:
            used = links["E"][r0, c0] + links["W"][r0, c0]
        elif c0 == c1 and r1 == r0 + 1:
            used = links["S"][r0, c0] + links["N"][r0, c0]
        else:
            raise MeshMappingError(f"defective link {a}-{b}: cores are not adjacent")
        if used:
            raise MeshMappingError(f"{algo}: schedule uses dead link {a}-{b}")
