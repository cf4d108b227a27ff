"""Pure mesh schedules: logical grids on a defective mesh, MeshGEMM/Cannon/SUMMA steps, the
interleaved ring, the K-tree reduce plan, and the message batches they send.

Everything here is geometry and arithmetic on numpy arrays: no timing. The compiler turns these
schedules into :class:`~tilewright.compiler.program.MeshPhaseTask` s
(:mod:`tilewright.compiler.mesh_partition`); the mesh model (:mod:`tilewright.dataflow_sim.mesh`)
costs the same schedules. Conventions (XY routing, multicast as one flow to the farthest receiver,
``stages``): :mod:`tilewright.dataflow_sim.mesh.model`.

**Grids.** An algorithm runs on a logical ``pr x pc`` grid; :class:`Grid` maps logical row ``i``
to physical row ``rows[i]`` and logical column ``j`` to physical column ``cols[j]``. Every
schedule sends messages along straight logical rows/columns, XY-routed, so a message between two
cores of the grid only travels along a *kept* physical row (its horizontal leg) and a kept
physical column (its vertical leg). :func:`healthy_grid` drops every physical row holding a dead
core or dead horizontal link and every column holding a dead core or dead vertical link ("skip").
:func:`routearound_grid` + :func:`route_around` keep more cores by routing around defects.
"""

from __future__ import annotations

from dataclasses import dataclass, fields
from typing import Any

import numpy as np

import tilewright.compiler.mesh_repair as mesh_repair  # it imports this module too (its doc)
from tilewright.arch import MeshSpec
from tilewright.compiler.mesh_algos import GEMM_ALGOS, GEMV_ALGOS
from tilewright.errors import UserError

__all__ = ["MeshScheduleError", "MessageBatch", "Grid", "healthy_grid", "bad_lines",
           "interleaved_ring", "Move",
           "Step", "GEMM_ALGOS", "GEMV_ALGOS", "gemm_steps", "ktree_plan", "FlowBatch",
           "PhaseSpec", "move_flows", "gemm_phase_specs", "ktree_flows", "bcast_row_flows",
           "bcast_col_flows", "allreduce_phase_specs", "gemv_phase_specs",
           "row_allreduce_specs", "transpose_flows", "routearound_grid", "route_around",
           "route_around_specs", "ktree_root", "kv_shift_specs", "GEMM_RECV_PANELS",
           "gemm_memory_bytes", "gemm_panel", "gemv_memory_bytes", "gemv_chunk", "route_counts"]

#: ``summa_relay`` is SUMMA as WaferLLM's baseline (He et al., OSDI 2025, sec. 5.1 (2) and
#: sec. 7.2): every core of the row/column relays the block (see :func:`gemm_phase_specs`).


class MeshScheduleError(UserError, ValueError):
    """A schedule the mesh cannot hold: the grid does not fit the healthy part of the mesh, a
    defect lies outside it, or a parameter is out of range. The message names the limit."""


# ---- grids -------------------------------------------------------------------------------

@dataclass(frozen=True)
class Grid:
    """Physical row of each logical row, physical column of each logical column."""

    rows: np.ndarray
    cols: np.ndarray
    mesh_rows: int
    mesh_cols: int
    dropped_rows: tuple[int, ...] = ()
    dropped_cols: tuple[int, ...] = ()

    @property
    def pr(self) -> int:
        return int(self.rows.size)

    @property
    def pc(self) -> int:
        return int(self.cols.size)

    def mask(self) -> np.ndarray:
        """Bool (mesh rows, mesh cols): cores of the grid."""
        m = np.zeros((self.mesh_rows, self.mesh_cols), bool)
        m[np.ix_(self.rows, self.cols)] = True
        return m

    def scatter(self, values: np.ndarray) -> np.ndarray:
        """A (pr, pc) array of per-logical-core values placed on the physical mesh (0 elsewhere)."""
        out = np.zeros((self.mesh_rows, self.mesh_cols), dtype=np.asarray(values).dtype)
        out[np.ix_(self.rows, self.cols)] = values
        return out

    def sub(self, r0: int, r1: int, c0: int, c1: int) -> "Grid":
        """The sub-grid of logical rows r0..r1-1 and columns c0..c1-1 (a region of the grid)."""
        return Grid(self.rows[r0:r1], self.cols[c0:c1], self.mesh_rows, self.mesh_cols,
                    self.dropped_rows, self.dropped_cols)


def bad_lines(mesh: MeshSpec) -> tuple[set[int], set[int]]:
    """Physical rows and columns that hold a dead core or a dead link along them."""
    bad_r: set[int] = set()
    bad_c: set[int] = set()
    for r, c in mesh.defective_cores:
        if not (0 <= r < mesh.rows and 0 <= c < mesh.cols):
            raise MeshScheduleError(f"defective core ({r}, {c}) is outside the "
                                    f"{mesh.rows}x{mesh.cols} mesh")
        bad_r.add(int(r))
        bad_c.add(int(c))
    for a, b in mesh.defective_links:
        (r0, c0), (r1, c1) = sorted((tuple(a), tuple(b)))
        if r0 == r1 and c1 == c0 + 1:
            bad_r.add(int(r0))
        elif c0 == c1 and r1 == r0 + 1:
            bad_c.add(int(c0))
        else:
            raise MeshScheduleError(f"defective link {tuple(a)}-{tuple(b)}: cores are not "
                                    "adjacent")
    return bad_r, bad_c


def healthy_grid(mesh: MeshSpec, *, square: bool = False, pr: int | None = None,
                 pc: int | None = None) -> Grid:
    """The largest logical grid avoiding every defect by dropping rows/columns, optionally
    square or cut to ``pr x pc`` (the first kept rows/columns)."""
    if mesh.repairs_defects:     # spares: the hardware hides defects (compiler/mesh_repair.py)
        return mesh_repair.repaired_grid(mesh, square=square, pr=pr, pc=pc)
    bad_r, bad_c = bad_lines(mesh)
    rows = np.array([r for r in range(mesh.rows) if r not in bad_r], dtype=np.int64)
    cols = np.array([c for c in range(mesh.cols) if c not in bad_c], dtype=np.int64)
    if rows.size == 0 or cols.size == 0:
        raise MeshScheduleError(f"no healthy rows/columns left on the {mesh.rows}x{mesh.cols} "
                                f"mesh ({len(bad_r)} rows, {len(bad_c)} columns hold a defect); "
                                "spare_rows/spare_cols let the hardware repair defects instead")
    if square:
        p = min(rows.size, cols.size)
        pr = p if pr is None else pr
        pc = p if pc is None else pc
    for name, want, have in (("rows", pr, rows.size), ("cols", pc, cols.size)):
        if want is not None and not 1 <= want <= have:
            raise MeshScheduleError(
                f"logical grid needs {want} {name} but the {mesh.rows}x{mesh.cols} mesh has "
                f"{have} healthy {name} ({len(bad_r) if name == 'rows' else len(bad_c)} dropped "
                f"for defects)")
    rows = rows[:pr] if pr is not None else rows
    cols = cols[:pc] if pc is not None else cols
    return Grid(rows, cols, mesh.rows, mesh.cols, tuple(sorted(bad_r)), tuple(sorted(bad_c)))


# ---- message batches and phases ------------------------------------------------------------

class MessageBatch:
    """Messages released together (physical coordinates): the dataclass fields of a subclass,
    int64 arrays of one length F, in the order ``sr, sc`` (source row/col), ``dr, dc``
    (destination; a multicast along a line: its farthest receiver), the amount per message
    (:class:`FlowBatch`: ``nbytes``; the mesh model's ``Flows``: ``flits``), ``stages`` (cores
    whose processor handles it), ``times`` (in how many of the phase's repeats it runs, -1 =
    all). :meth:`make` drops messages to self and messages that never run (they cost nothing).
    """

    @classmethod
    def field_names(cls) -> tuple[str, ...]:
        """The subclass's dataclass field names, in order (cached on the class)."""
        names = cls.__dict__.get("_field_names")
        if names is None:
            names = tuple(f.name for f in fields(cls))
            cls._field_names = names
        return names

    @classmethod
    def make(cls, *args: Any, **kwargs: Any):
        """A batch from broadcastable values (positional in field order, or by field name);
        ``stages`` defaults to 1, ``times`` to -1."""
        names = cls.field_names()
        if len(args) > len(names):
            raise TypeError(f"{cls.__name__}.make takes at most {len(names)} values")
        vals = dict(zip(names, args))
        for k, v in kwargs.items():
            if k not in names or k in vals:
                raise TypeError(f"{cls.__name__}.make: unexpected or repeated field {k!r}")
            vals[k] = v
        vals.setdefault("stages", 1)
        vals.setdefault("times", -1)
        missing = [n for n in names if n not in vals]
        if missing:
            raise TypeError(f"{cls.__name__}.make: missing {', '.join(missing)}")
        arrs = np.broadcast_arrays(*(np.asarray(vals[n], dtype=np.int64) for n in names))
        arrs = [np.ascontiguousarray(a.ravel()) for a in arrs]
        keep = ((arrs[0] != arrs[2]) | (arrs[1] != arrs[3])) & (arrs[6] != 0)  # local: free
        if not keep.all():
            arrs = [a[keep] for a in arrs]
        return cls(*arrs)

    @classmethod
    def concat(cls, parts: list):
        """One batch of every message of ``parts`` (None and empty parts skipped)."""
        parts = [p for p in parts if p is not None and len(p)]
        if not parts:
            z = np.zeros(0, np.int64)
            return cls(*(z for _ in cls.field_names()))
        return cls(*(np.concatenate([getattr(p, f) for p in parts]) for f in cls.field_names()))

    def __len__(self) -> int:
        return int(self.sr.shape[0])

    @property
    def hops(self) -> np.ndarray:
        return np.abs(self.dc - self.sc) + np.abs(self.dr - self.sr)


def route_counts(f: MessageBatch, rows: int, cols: int) -> np.ndarray:
    """Per core of a ``rows x cols`` mesh: number of messages of ``f`` whose XY path touches it
    (source, transit, destination): the route ids the core needs in that phase (the mesh model's
    ``max_routes_per_core`` rule, :mod:`tilewright.dataflow_sim.mesh.model`)."""
    lo = np.minimum(f.sc, f.dc)
    hi = np.maximum(f.sc, f.dc) + 1
    size = rows * (cols + 1)
    cov = (np.bincount(f.sr * (cols + 1) + lo, minlength=size)
           - np.bincount(f.sr * (cols + 1) + hi, minlength=size))
    out = np.cumsum(cov.reshape(rows, cols + 1), axis=1, dtype=np.int32)[:, :-1]
    # vertical leg: column dc, from the row after the turn core to the destination
    v = f.dr != f.sr
    if v.any():
        vlo = np.where(f.dr > f.sr, f.sr + 1, f.dr)[v]
        vhi = np.where(f.dr > f.sr, f.dr + 1, f.sr)[v]
        vc = f.dc[v]
        size = cols * (rows + 1)
        covv = (np.bincount(vc * (rows + 1) + vlo, minlength=size)
                - np.bincount(vc * (rows + 1) + vhi, minlength=size))
        out += np.cumsum(covv.reshape(cols, rows + 1), axis=1, dtype=np.int32)[:, :-1].T
    return out


@dataclass(frozen=True)
class FlowBatch(MessageBatch):
    """A :class:`MessageBatch` with ``nbytes`` bytes per message (the compiler's schedules)."""

    sr: np.ndarray
    sc: np.ndarray
    dr: np.ndarray
    dc: np.ndarray
    nbytes: np.ndarray
    stages: np.ndarray
    times: np.ndarray


@dataclass
class PhaseSpec:
    """One bulk-synchronous step: messages plus per-core work (semantics of
    :class:`tilewright.dataflow_sim.mesh.model.Phase`). ``macs`` and ``vector_ops`` are per
    core (every core of the op's grid); ``repeat`` back-to-back runs; ``route_group`` marks
    phases that are translations of one another; ``relay_wave``: the message-only next wave of
    the previous phase's rerouted messages (see :func:`route_around_specs`)."""

    name: str
    flows: FlowBatch | None = None
    macs: int = 0
    overlap: bool = False
    repeat: int = 1
    route_group: str | None = None
    vector_ops: int = 0
    relay_wave: bool = False


def transpose_flows(f: FlowBatch) -> FlowBatch:
    """The same messages with rows and columns swapped (a column schedule run along rows)."""
    return FlowBatch(f.sc, f.sr, f.dc, f.dr, f.nbytes, f.stages, f.times)


# ---- GEMM: MeshGEMM, Cannon, SUMMA ---------------------------------------------------------

def interleaved_ring(p: int) -> np.ndarray:
    """Physical index of ring position u: evens ascending then odds descending.
    Consecutive positions (and the wrap from the last to the first) are <= 2 apart."""
    return np.concatenate([np.arange(0, p, 2), np.arange(1, p, 2)[::-1]]).astype(np.int64)


@dataclass
class Move:
    """Every logical core (u, v) receives buffer ``buf`` of core (src_u[u,v], src_v[u,v]) into
    ``into`` (default ``buf``). ``kind``: 'shift' (a unicast per core), 'bcast_row' /
    'bcast_col' (one multicast per row / column from its single source). ``count[u, v]``: in
    how many of the step's repeats core (u, v) receives (None: all)."""

    buf: str
    kind: str
    src_u: np.ndarray
    src_v: np.ndarray
    count: np.ndarray | None = None
    into: str | None = None


@dataclass
class Step:
    """Compute on the current buffers (``C += X @ Y`` for ``operands = (X, Y)``), while the
    moves deliver the next ones; repeated ``repeat`` times."""

    name: str
    moves: list[Move]
    operands: tuple[str, str] | None
    overlap: bool
    repeat: int = 1


def _rotate(p: int, axis: str, amount: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Source coords for a rotation by ``amount[line]`` (+1 = towards lower index) along axis."""
    u, v = np.meshgrid(np.arange(p), np.arange(p), indexing="ij")
    if axis == "row":        # A: along each row u, amount per row
        return u, (v + amount[:, None]) % p
    return (u + amount[None, :]) % p, v      # B: along each column v


def gemm_steps(algo: str, p: int, *, align: bool = True) -> list[Step]:
    """The schedule of ``algo`` on a P x P grid, in logical (algorithm) coordinates
    (see :mod:`tilewright.dataflow_sim.mesh.gemm` for the algorithms)."""
    if algo not in GEMM_ALGOS:
        raise MeshScheduleError(f"GEMM algo {algo!r}: must be one of {', '.join(GEMM_ALGOS)}")
    idx = np.arange(p)
    one = np.ones(p, np.int64)
    steps: list[Step] = []
    if algo in ("summa", "summa_relay"):
        u, v = np.meshgrid(idx, idx, indexing="ij")

        def bcast(k: int) -> list[Move]:
            kk = np.broadcast_to(np.int64(k), (p, p))
            return [Move("A", "bcast_row", u, kk, into="Ab"),
                    Move("B", "bcast_col", kk, v, into="Bb")]
        steps.append(Step("bcast 0", bcast(0), None, False))
        for k in range(1, p):
            steps.append(Step(f"bcast {k} + gemm {k - 1}", bcast(k), ("Ab", "Bb"), True))
        steps.append(Step(f"gemm {p - 1}", [], ("Ab", "Bb"), False))
        return steps
    # Cannon and MeshGEMM share the schedule; they differ in placement (see gemm_phase_specs)
    if align and p > 1:
        left = idx <= p - idx                     # rotate the shorter way round
        dist = np.where(left, idx, p - idx)       # row u: u steps left or p-u steps right
        sign = np.where(left, 1, -1)
        au, av = _rotate(p, "row", sign)
        bu, bv = _rotate(p, "col", sign)
        cnt_a = np.broadcast_to(dist[:, None], (p, p)).copy()
        cnt_b = np.broadcast_to(dist[None, :], (p, p)).copy()
        steps.append(Step("align", [Move("A", "shift", au, av, cnt_a),
                                    Move("B", "shift", bu, bv, cnt_b)], None, False,
                          repeat=int(dist.max())))
    au, av = _rotate(p, "row", one)
    bu, bv = _rotate(p, "col", one)
    if p > 1:
        steps.append(Step("shift + gemm", [Move("A", "shift", au, av), Move("B", "shift", bu, bv)],
                          ("A", "B"), True, repeat=p - 1))
    steps.append(Step("gemm", [], ("A", "B"), False))
    return steps


def move_flows(mv: Move, grid: Grid, place: np.ndarray, nbytes: int) -> FlowBatch:
    """Physical messages of one move; ``place[u]`` = grid index of logical position u."""
    pr = grid.rows[place]      # physical row of logical row u
    pc = grid.cols[place]
    p = place.size
    if mv.kind == "shift":
        u, v = np.meshgrid(np.arange(p), np.arange(p), indexing="ij")
        times = -1 if mv.count is None else mv.count
        return FlowBatch.make(pr[mv.src_u], pc[mv.src_v], pr[u], pc[v], nbytes, 1, times)
    if mv.kind == "bcast_row":       # source column per row; receivers span the row
        src_c = pc[mv.src_v[:, 0]]
        lo, hi = pc.min(), pc.max()
        return FlowBatch.make(np.r_[pr, pr], np.r_[src_c, src_c], np.r_[pr, pr],
                              np.r_[np.full(p, lo), np.full(p, hi)], nbytes, 1)
    if mv.kind == "bcast_col":
        src_r = pr[mv.src_u[0, :]]
        lo, hi = pr.min(), pr.max()
        return FlowBatch.make(np.r_[src_r, src_r], np.r_[pc, pc],
                              np.r_[np.full(p, lo), np.full(p, hi)], np.r_[pc, pc], nbytes, 1)
    raise MeshScheduleError(f"unknown move kind {mv.kind!r}: shift, bcast_row or bcast_col")


#: receive panels per core besides its own A, B and C blocks: a Cannon-style shift receives
#: the next panel while computing on its own (one Mt x kb + kb x Nt panel pair, kept in a ring
#: buffer of Kt + kb columns); SUMMA receives into two panel pairs (double-buffered broadcast)
GEMM_RECV_PANELS = {"mesh": 1, "cannon": 1, "summa": 2, "summa_relay": 2}


def gemm_memory_bytes(algo: str, mt: int, kt: int, nt: int, kb: int, *, elem_bytes: int,
                      acc_bytes: int) -> int:
    """Bytes per core of ``algo`` with K panels ``kb`` wide: own A (Mt x Kt) and B (Kt x Nt)
    blocks at ``elem_bytes``, C (Mt x Nt) at ``acc_bytes``, plus ``GEMM_RECV_PANELS[algo]``
    receive panels of Mt x kb (A) and kb x Nt (B)."""
    if algo not in GEMM_ALGOS:
        raise MeshScheduleError(f"GEMM algo {algo!r}: must be one of {', '.join(GEMM_ALGOS)}")
    own = (mt * kt + kt * nt) * elem_bytes + mt * nt * acc_bytes
    return own + GEMM_RECV_PANELS[algo] * (mt + nt) * kb * elem_bytes


def gemm_panel(algo: str, mt: int, kt: int, nt: int, *, sram_bytes: float, elem_bytes: int,
               acc_bytes: int, what: str = "") -> int:
    """The K-panel width (elements, 1..Kt) that ``algo`` moves per message, chosen from the
    core's SRAM: the widest that fits (``Kt``, one message per block, when the whole block
    fits), balanced so that ``ceil(Kt / kb)`` panels of equal width cover the block. A narrower
    panel costs one more message latency per panel (SRAM-limited: more SRAM, wider panels,
    fewer steps). Raises :class:`MeshScheduleError` when even a 1-wide panel does not fit
    (``what``: the run's shape and grid, for the message) or ``algo`` is unknown."""
    one = gemm_memory_bytes(algo, mt, kt, nt, 1, elem_bytes=elem_bytes, acc_bytes=acc_bytes)
    if one > sram_bytes:
        raise MeshScheduleError(
            f"{algo} gemm{what}: needs {one / 1024:.2f} KiB per core even with 1-wide K panels (A "
            f"block {mt}x{kt} + B block {kt}x{nt} at {elem_bytes} B, C block {mt}x{nt} at "
            f"{acc_bytes} B, {GEMM_RECV_PANELS[algo]} x receive panels {mt}x1 + 1x{nt}) but "
            f"core_sram_kib = {sram_bytes / 1024:g}")
    per = GEMM_RECV_PANELS[algo] * (mt + nt) * elem_bytes
    kb = int(min(kt, 1 + (sram_bytes - one) // per))
    nsub = -(-kt // kb)
    return -(-kt // nsub)


def gemm_phase_specs(algo: str, grid: Grid, mt: int, kt: int, nt: int, *, elem_bytes: int,
                     align: bool = True, kb: int | None = None) -> list[PhaseSpec]:
    """Phases of ``algo`` on ``grid`` (square, P x P) for blocks Mt x Kt x Nt: per step, the
    moves' messages (A panel ``Mt*kb*elem_bytes`` B, B panel ``kb*Nt*elem_bytes`` B) and
    ``Mt*kb*Nt`` MACs per core when the step multiplies.

    ``kb`` (default ``Kt``): K-panel width (:func:`gemm_panel`); every block moves as
    ``q = ceil(Kt/kb)`` panels, each its own message overlapped with the previous panel's
    multiply, so each step's phase repeats q times (SUMMA: the first panel of block 0 is
    sent before any multiply, the last panel's multiply follows the last broadcast). With
    ``kb = Kt`` the phases are the block schedule the RTL mesh runs.

    ``summa_relay`` is SUMMA as WaferLLM describes its baseline (He et al., "WaferLLM", OSDI
    2025, sec. 5.1 (2) and Figure 6 (2)): the router cannot hold a route per possible root
    (R), so the broadcast goes "step-by-step via intermediate cores": every core between the
    root and the end of the line receives the panel in its processor and forwards it, a
    streaming relay (flits forwarded as they arrive, sec. 7.2's "pipeline broadcast"), so a
    broadcast over d hops costs ``(alpha + beta) * d + W`` (``stages = hops``): the per-step
    ``O[(alpha + beta) N]`` critical path of sec. 5.1. Cannon (sec. 5.1 (3)) passes the
    wrap-around "directly from the head to the tail core": ``alpha * (P - 1) + beta + W``, as
    ``cannon`` already does. ``summa`` keeps the hardware multicast (one routing stage)."""
    p = grid.pr
    kb = kt if kb is None else int(kb)
    if not 1 <= kb <= kt:
        raise MeshScheduleError(f"K panel kb = {kb}: must be 1..Kt = {kt}")
    q = -(-kt // kb)
    place = interleaved_ring(p) if algo == "mesh" else np.arange(p)
    size = {"A": mt * kb * elem_bytes, "B": kb * nt * elem_bytes}
    summa = algo in ("summa", "summa_relay")
    phases = []
    for st in gemm_steps(algo, p, align=align):
        flows = FlowBatch.concat([move_flows(mv, grid, place, size[mv.buf]) for mv in st.moves])
        if algo == "summa_relay" and len(flows):
            flows = FlowBatch(flows.sr, flows.sc, flows.dr, flows.dc, flows.nbytes,
                              np.maximum(flows.hops, 1), flows.times)
        if q > 1 and len(flows):
            flows = FlowBatch(flows.sr, flows.sc, flows.dr, flows.dc, flows.nbytes,
                              flows.stages, np.where(flows.times < 0, -1, flows.times * q))
        macs = mt * kb * nt if st.operands is not None else 0
        group = "summa broadcast" if summa and st.moves else None
        if summa and st.operands is None:          # bcast 0: first panel, then the other q-1
            phases.append(PhaseSpec(st.name, flows, 0, False, 1, group))
            if q > 1:
                phases.append(PhaseSpec(f"{st.name} (panels 2..{q})", flows, mt * kb * nt,
                                        True, q - 1, group))
            continue
        if summa and not st.moves:                 # the last panel's multiply
            phases.append(PhaseSpec(st.name, flows, macs, False, 1, group))
            continue
        phases.append(PhaseSpec(st.name, flows, macs, st.overlap, st.repeat * q, group))
    return phases


# ---- GEMV: K-tree reduce, ring all-reduce --------------------------------------------------

def ktree_plan(n: int, levels: int = 2, group: int | None = None) -> list[list[np.ndarray]]:
    """Per level, the groups (arrays of member indices 0..n-1, in order) of a K-tree reduce.
    Each group reduces into its middle member (``members[len // 2]``); the roots of one level
    are the members of the next; the last level is one group. ``group``: size of the groups of
    every level but the last (default ``round(n ** (1/levels))``, at least 2)."""
    if levels < 1:
        raise MeshScheduleError(f"K-tree levels = {levels}: must be >= 1")
    g = max(2, round(n ** (1.0 / levels))) if group is None else int(group)
    if g < 2:
        raise MeshScheduleError(f"K-tree group size = {g}: must be >= 2")
    members = np.arange(n)
    plan = []
    for lvl in range(levels):
        if lvl == levels - 1 or members.size <= g:
            groups = [members]
        else:
            groups = [members[s:s + g] for s in range(0, members.size, g)]
        plan.append(groups)
        members = np.array([gr[gr.size // 2] for gr in groups])
        if members.size == 1:
            break
    return plan


def ktree_root(plan: list[list[np.ndarray]]) -> int:
    """Index of the member that holds the full sum after ``plan``."""
    return int(plan[-1][0][plan[-1][0].size // 2])


def ktree_flows(plan, rows_phys: np.ndarray, cols_phys: np.ndarray, nbytes: int
                ) -> list[FlowBatch]:
    """Per level, the chain messages of every column: first member -> root, last member -> root
    (a streaming chain-reduction: ``stages`` = cores passed)."""
    out = []
    for groups in plan:
        src, dst, stg = [], [], []
        for gr in groups:
            r = gr.size // 2
            if r > 0:
                src.append(gr[0]); dst.append(gr[r]); stg.append(r)  # noqa: E702
            if gr.size - 1 > r:
                src.append(gr[-1]); dst.append(gr[r]); stg.append(gr.size - 1 - r)  # noqa: E702
        s, d, st = (np.asarray(a, np.int64) for a in (src, dst, stg))
        nc = cols_phys.size
        out.append(FlowBatch.make(np.repeat(rows_phys[s][None, :], nc, 0),
                                  cols_phys[:, None], np.repeat(rows_phys[d][None, :], nc, 0),
                                  cols_phys[:, None], nbytes, st[None, :]))
    return out


def bcast_col_flows(root_row: int, rows_phys, cols_phys, nbytes: int) -> FlowBatch:
    """Every column multicasts from logical row ``root_row`` up and down the column."""
    nc = cols_phys.size
    r = rows_phys[root_row]
    return FlowBatch.make(np.full(2 * nc, r), np.r_[cols_phys, cols_phys],
                          np.r_[np.full(nc, rows_phys.min()), np.full(nc, rows_phys.max())],
                          np.r_[cols_phys, cols_phys], nbytes, 1)


def bcast_row_flows(src_col: int, rows_phys, cols_phys, nbytes: int) -> FlowBatch:
    """Every row multicasts from logical column ``src_col`` west and east along the row."""
    nr = rows_phys.size
    c = cols_phys[src_col]
    return FlowBatch.make(np.r_[rows_phys, rows_phys], np.full(2 * nr, c),
                          np.r_[rows_phys, rows_phys],
                          np.r_[np.full(nr, cols_phys.min()), np.full(nr, cols_phys.max())],
                          nbytes, 1)


def allreduce_phase_specs(grid: Grid, nt: int, acc_bytes: int,
                          chunk: int | None = None) -> list[PhaseSpec]:
    """Ring all-reduce along every column on the interleaved ring (<= 2 hops per step). Each
    step passes one ring chunk of ``ceil(Nt/pr)`` values; a receive buffer of ``chunk`` values
    (:func:`gemv_chunk`) smaller than that splits every step into ``ceil(ring chunk / chunk)``
    messages sent one after another."""
    pr = grid.pr
    if pr == 1:
        return []
    ring = interleaved_ring(pr)
    rc = -(-nt // pr)
    pieces = 1 if chunk is None or chunk >= rc else -(-rc // int(chunk))
    piece = -(-rc // pieces)
    nxt = np.roll(ring, -1)          # ring position q sends to q+1
    nc = grid.pc
    f = FlowBatch.make(np.repeat(grid.rows[ring][None, :], nc, 0), grid.cols[:, None],
                       np.repeat(grid.rows[nxt][None, :], nc, 0), grid.cols[:, None],
                       piece * acc_bytes, 1)
    return [PhaseSpec("ring reduce-scatter", f, 0, False, (pr - 1) * pieces),
            PhaseSpec("ring all-gather", f, 0, False, (pr - 1) * pieces)]


def gemv_memory_bytes(kt: int, nt: int, chunk: int, *, elem_bytes: int, acc_bytes: int) -> int:
    """Bytes per core of a GEMV with a receive buffer of ``chunk`` partial sums: W block
    Kt x Nt and x segment Kt at ``elem_bytes``, partial y (Nt) and the receive buffer at
    ``acc_bytes``."""
    return (kt * nt + kt) * elem_bytes + (nt + chunk) * acc_bytes


def gemv_chunk(kt: int, nt: int, *, sram_bytes: float, elem_bytes: int, acc_bytes: int,
               limit: int | None = None, what: str = "") -> int:
    """Partial sums per reduce message, chosen from the core's SRAM: the most (up to ``limit``,
    default Nt) whose receive buffer fits beside the W block, x segment and partial y,
    balanced so that equal messages cover the limit. Fewer per message means more messages,
    each paying its latency (SRAM-limited: more SRAM, bigger messages, less time). Raises
    :class:`MeshScheduleError` when even a 1-value buffer does not fit (``what``: the run's
    shape and grid, for the message)."""
    limit = nt if limit is None else min(int(limit), nt)
    one = gemv_memory_bytes(kt, nt, 1, elem_bytes=elem_bytes, acc_bytes=acc_bytes)
    if one > sram_bytes:
        raise MeshScheduleError(
            f"gemv{what}: needs {one / 1024:.2f} KiB per core even with a 1-value receive buffer "
            f"(W block {kt}x{nt} + x segment {kt} at {elem_bytes} B, partial y {nt} + 1 at "
            f"{acc_bytes} B) but core_sram_kib = {sram_bytes / 1024:g}")
    c = int(min(limit, 1 + (sram_bytes - one) // acc_bytes))
    return -(-limit // -(-limit // c))


def gemv_phase_specs(algo: str, grid: Grid, kt: int, nt: int, *, elem_bytes: int,
                     acc_bytes: int, levels: int = 2, group: int | None = None,
                     broadcast_x: bool = True, chunk: int | None = None) -> list[PhaseSpec]:
    """Phases of a GEMV on ``grid`` (K on rows, N on columns, blocks Kt x Nt): x broadcast
    along rows, local GEMV (``Kt*Nt`` MACs per core), all-reduce of the Nt partial sums along
    every column (``mesh``: K-tree + column broadcast; ``allreduce``: ring). ``chunk``
    (:func:`gemv_chunk`, default Nt): partial sums per reduce message; the K-tree reduces
    ``ceil(Nt/chunk)`` chunks one after another (each level's phase repeats), the ring splits
    its steps (:func:`allreduce_phase_specs`). The y broadcast lands in the partial-y buffer
    and is not split."""
    if algo not in GEMV_ALGOS:
        raise MeshScheduleError(f"GEMV algo {algo!r}: must be one of {', '.join(GEMV_ALGOS)}")
    chunk = nt if chunk is None else int(chunk)
    if not 1 <= chunk <= nt:
        raise MeshScheduleError(f"GEMV receive chunk = {chunk}: must be 1..Nt = {nt}")
    q = -(-nt // chunk)
    phases = []
    if broadcast_x and grid.pc > 1:
        phases.append(PhaseSpec("broadcast x along rows",
                                bcast_row_flows(grid.pc // 2, grid.rows, grid.cols,
                                                kt * elem_bytes)))
    phases.append(PhaseSpec("local gemv", None, kt * nt))
    if algo == "mesh":
        plan = ktree_plan(grid.pr, levels, group)
        if grid.pr > 1:
            for lvl, f in enumerate(ktree_flows(plan, grid.rows, grid.cols, chunk * acc_bytes)):
                phases.append(PhaseSpec(f"k-tree reduce level {lvl + 1}", f, repeat=q))
            phases.append(PhaseSpec("broadcast y along columns",
                                    bcast_col_flows(ktree_root(plan), grid.rows, grid.cols,
                                                    nt * acc_bytes)))
    else:
        phases += allreduce_phase_specs(grid, nt, acc_bytes, chunk)
    return phases


def row_allreduce_specs(grid: Grid, nbytes: int, levels: int = 2) -> list[PhaseSpec]:
    """K-tree all-reduce of ``nbytes`` along every row of ``grid`` (over its columns), then a
    row multicast of the sum from the root column: the result is on every core of the row."""
    plan = ktree_plan(grid.pc, levels)
    phases = [PhaseSpec(f"row reduce {i}", transpose_flows(f))
              for i, f in enumerate(ktree_flows(plan, grid.cols, grid.rows, nbytes))]
    phases.append(PhaseSpec("row broadcast",
                            bcast_row_flows(ktree_root(plan), grid.rows, grid.cols, nbytes)))
    return phases


def kv_shift_specs(grid: Grid, nbytes: int) -> list[PhaseSpec]:
    """The shift-based KV cache's step: every core passes its oldest token's ``nbytes`` of K/V
    to the core of the next grid row (the last row's oldest token leaves the window)."""
    if grid.pr < 2:
        return [PhaseSpec("kv shift (one row: nothing to shift)")]
    r = grid.rows
    f = FlowBatch.make(r[:-1, None], grid.cols[None, :], r[1:, None], grid.cols[None, :], nbytes)
    return [PhaseSpec("kv shift to next row", f)]


# ---- route-around defects ------------------------------------------------------------------

def routearound_grid(mesh: MeshSpec, *, square: bool = False, pr: int | None = None,
                     pc: int | None = None) -> Grid:
    """A logical grid that keeps every row and drops only the *columns* of dead cores; dead
    links drop nothing. Messages that would cross a dead core or link are rerouted by
    :func:`route_around`. Keeps ``rows x (cols - dead-core columns)`` cores where
    :func:`healthy_grid` keeps ``(rows - bad rows) x (cols - bad cols)``."""
    if mesh.repairs_defects:
        raise MeshScheduleError(
            f"defects 'route': the {mesh.rows}x{mesh.cols} mesh has spare_rows = "
            f"{mesh.spare_rows}, spare_cols = {mesh.spare_cols}, so its hardware repairs the "
            "defects and programs see an intact logical grid; accepted: defects 'skip' (the "
            "default), or route on a mesh without spares")
    bad_lines(mesh)                                       # validates the defect list
    dead_c = {int(c) for _, c in mesh.defective_cores}
    rows = np.arange(mesh.rows, dtype=np.int64)
    cols = np.array([c for c in range(mesh.cols) if c not in dead_c], dtype=np.int64)
    if cols.size == 0:
        raise MeshScheduleError(f"no healthy columns left on the {mesh.rows}x{mesh.cols} mesh")
    if square:
        p = min(rows.size, cols.size)
        pr = p if pr is None else pr
        pc = p if pc is None else pc
    for name, want, have in (("rows", pr, rows.size), ("cols", pc, cols.size)):
        if want is not None and not 1 <= want <= have:
            raise MeshScheduleError(f"logical grid needs {want} {name} but the route-around grid "
                                    f"of the {mesh.rows}x{mesh.cols} mesh has {have}")
    rows = rows[:pr] if pr is not None else rows
    cols = cols[:pc] if pc is not None else cols
    return Grid(rows, cols, mesh.rows, mesh.cols, (), tuple(sorted(dead_c)))


class _Defects:
    """Dead cores and links of a mesh as boolean maps (links stored at their lower core)."""

    def __init__(self, mesh: MeshSpec):
        self.rows, self.cols = mesh.rows, mesh.cols
        self.core = np.zeros((mesh.rows, mesh.cols), bool)
        self.hlink = np.zeros((mesh.rows, max(mesh.cols - 1, 0)), bool)   # (r,c)-(r,c+1)
        self.vlink = np.zeros((max(mesh.rows - 1, 0), mesh.cols), bool)   # (r,c)-(r+1,c)
        for r, c in mesh.defective_cores:
            self.core[r, c] = True
        for a, b in mesh.defective_links:
            (r0, c0), (r1, c1) = sorted((tuple(a), tuple(b)))
            if r0 == r1:
                self.hlink[r0, c0] = True
            else:
                self.vlink[r0, c0] = True

    def line(self, horizontal: bool, idx: int) -> tuple[np.ndarray, np.ndarray]:
        """(dead cores along the line, dead links between positions i and i+1)."""
        if horizontal:
            return self.core[idx], self.hlink[idx]
        return self.core[:, idx], self.vlink[:, idx]

    def path_ok(self, sr: int, sc: int, dr: int, dc: int) -> bool:
        """Whether the XY path (sr,sc) -> (dr,dc) touches no dead core or link."""
        if not (0 <= sr < self.rows and 0 <= dr < self.rows and 0 <= sc < self.cols
                and 0 <= dc < self.cols):
            return False
        lo, hi = min(sc, dc), max(sc, dc)
        if self.core[sr, lo:hi + 1].any() or self.hlink[sr, lo:hi].any():
            return False
        lo, hi = min(sr, dr), max(sr, dr)
        return not (self.core[lo:hi + 1, dc].any() or self.vlink[lo:hi, dc].any())


def _blocked(f: FlowBatch, dead: _Defects) -> np.ndarray:
    """Bool per flow: its XY path touches a dead core or link (vectorized per defect)."""
    hit = np.zeros(len(f), bool)
    hlo, hhi = np.minimum(f.sc, f.dc), np.maximum(f.sc, f.dc)
    vlo, vhi = np.minimum(f.sr, f.dr), np.maximum(f.sr, f.dr)
    for r, c in zip(*np.nonzero(dead.core)):
        hit |= (f.sr == r) & (hlo <= c) & (c <= hhi)
        hit |= (f.dc == c) & (vlo <= r) & (r <= vhi)
    for r, c in zip(*np.nonzero(dead.hlink)):
        hit |= (f.sr == r) & (hlo <= c) & (c + 1 <= hhi)
    for r, c in zip(*np.nonzero(dead.vlink)):
        hit |= (f.dc == c) & (vlo <= r) & (r + 1 <= vhi)
    return hit


def _detour(flow: tuple[int, ...], dead: _Defects, depth: int = 0) -> list[tuple[int, ...]]:
    """Pieces of one straight message that avoid every defect (see :func:`route_around`)."""
    sr, sc, dr, dc, nb, st, tm = flow
    if dead.path_ok(sr, sc, dr, dc):
        return [flow]
    if depth > 8 or (sr != dr and sc != dc):
        raise MeshScheduleError(
            f"message ({sr}, {sc}) -> ({dr}, {dc}) crosses a defect and is not a straight "
            "row/column message: route-around cannot reroute it (use the skip policy)")
    horizontal = sr == dr
    line, a, b = (sr, sc, dc) if horizontal else (sc, sr, dr)
    cores, links = dead.line(horizontal, line)
    step = 1 if b > a else -1
    # first blocked position along the way: a dead core at x (go around x-1 .. x+1) or a dead
    # link between x and x+step (go around x .. x+step)
    x = a
    while x != b:
        nxt = x + step
        link_dead = links[min(x, nxt)]
        if cores[nxt] and nxt != b:
            u, v = x, nxt + step
            break
        if link_dead:
            u, v = x, nxt
            break
        if cores[nxt]:
            raise MeshScheduleError(f"message ({sr}, {sc}) -> ({dr}, {dc}) ends on a dead core")
        x = nxt
    else:  # pragma: no cover - path_ok said it is blocked
        raise MeshScheduleError(f"message ({sr}, {sc}) -> ({dr}, {dc}): no defect found")
    if cores[a]:
        raise MeshScheduleError(f"message ({sr}, {sc}) -> ({dr}, {dc}) starts on a dead core")

    def at(pos: int, off: int = 0) -> tuple[int, int]:
        return (line + off, pos) if horizontal else (pos, line + off)

    for off in (1, -1):
        p_u, q_u, q_v, p_v = at(u), at(u, off), at(v, off), at(v)
        legs = [(*p_u, *q_u), (*q_u, *q_v), (*q_v, *p_v)]   # aside, along the parallel, back
        if all(dead.path_ok(*leg) for leg in legs):
            out = []
            if u != a:
                out.append((sr, sc, *p_u, nb, st, tm))
            out += [(*leg, nb, 1, tm) for leg in legs]
            if v != b:
                out += _detour((*p_v, dr, dc, nb, 1, tm), dead, depth + 1)
            return out
    raise MeshScheduleError(f"message ({sr}, {sc}) -> ({dr}, {dc}): no healthy parallel line "
                            f"next to the defect near {at(u)}; route-around impossible")


def route_around(f: FlowBatch, mesh: MeshSpec) -> tuple[list[FlowBatch], int]:
    """Reroute every straight row/column message whose XY path crosses a dead core or link.

    The message is cut at the defect: it travels to the last healthy core ``u`` before it; the
    core there forwards it one hop sideways onto the parallel line (row/column +1, else -1), the
    core there along the parallel line past the defect, and the core there one hop back onto
    the line at ``v`` just after the defect; from ``v`` it continues to its destination (a
    multicast continues as a multicast). The relay cores store and forward: every piece is an
    XY message of its own (1 routing stage; the first piece keeps the original ``stages``),
    sent when the previous piece has arrived.

    Returns the pieces as waves — wave 0 holds every untouched message and the first piece of
    each rerouted one, wave k the k-th pieces — and the number of extra hops (2 per detour).
    """
    if (not mesh.defective_cores and not mesh.defective_links) or mesh.repairs_defects:
        return [f], 0
    dead = _Defects(mesh)
    hit = _blocked(f, dead)
    if not hit.any():
        return [f], 0
    waves: list[list[tuple[int, ...]]] = []
    extra = 0
    for i in np.flatnonzero(hit):
        flow = tuple(int(getattr(f, k)[i]) for k in FlowBatch.field_names())
        new = _detour(flow, dead)
        extra += sum(abs(p[2] - p[0]) + abs(p[3] - p[1]) for p in new) - \
            (abs(flow[2] - flow[0]) + abs(flow[3] - flow[1]))
        for k, piece in enumerate(new):
            if len(waves) <= k:
                waves.append([])
            waves[k].append(piece)
    names = FlowBatch.field_names()
    out = [FlowBatch.make(*np.asarray(w, np.int64).reshape(-1, len(names)).T) for w in waves]
    out[0] = FlowBatch.concat([FlowBatch(*(getattr(f, k)[~hit] for k in names)), out[0]])
    return out, int(extra)


def route_around_specs(specs: list[PhaseSpec], mesh: MeshSpec) -> tuple[list[PhaseSpec], int]:
    """:func:`route_around` applied to every phase: a phase with rerouted messages keeps its
    compute and wave 0, and is followed (within each of its repeats, so the pair repeats
    together) by one message-only ``relay_wave`` phase per further wave. The model chains the
    waves (each waits for the previous: store-and-forward relays) on the communication side of
    the phase, so in a double-buffered (``overlap``) phase the chain overlaps its compute, as
    the relays forward while the step computes. Returns the
    specs and the extra hops summed over phases (one run of each)."""
    out, extra = [], 0
    for s in specs:
        if s.flows is None or not len(s.flows):
            out.append(s)
            continue
        waves, e = route_around(s.flows, mesh)
        extra += e
        if len(waves) == 1:
            out.append(s)
            continue
        out.append(PhaseSpec(s.name, waves[0], s.macs, s.overlap, s.repeat, None, s.vector_ops))
        out += [PhaseSpec(f"{s.name} (detour wave {k})", w, 0, False, s.repeat,
                          relay_wave=True) for k, w in enumerate(waves[1:], 1)]
    return out, extra
