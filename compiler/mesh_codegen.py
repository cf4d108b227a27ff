"""Mesh code generator: per-tile phase programs (instruction words of :mod:`~.mesh_isa`) for the
RTL mesh, built from the compiler's mesh Program.

The RTL mesh (:mod:`tilewright.rtl.mesh`) runs a list of phases; in each, every tile injects,
ejects (write or add) and multiplies as its instruction says. This module turns the *same*
Program the mesh model costs (:func:`~tilewright.dataflow_sim.mesh.run_mesh_program`) — a list
of :class:`~tilewright.compiler.program.MeshPhaseTask` s from
:mod:`tilewright.compiler.mesh_ops` (MeshGEMV; MeshGEMM, Cannon, SUMMA) — into those
instructions: each task's messages (geometry and bytes, flits = ``ceil(bytes / link bytes)``),
MACs per core, repeat and overlap are read from the Program and checked message by message
against what the RTL programs; the compiler's schedule (K-tree phases,
:func:`~tilewright.compiler.mesh_schedule.gemm_steps`) only says which buffer a message carries.
:func:`transfer_job` runs any Program of pure message phases (each message copies words).

Routes are dimension-order XY (:func:`xy_path`), written into each router's per-phase route
table under a route id (colour) per message (:meth:`_PhaseBuilder.route`; at most
``mesh.max_routes_per_core`` per core). Messages of one phase may share, fork from and
converge on links: the routers arbitrate at run time (:mod:`tilewright.rtl.mesh_router`), and
the mesh model's :mod:`tilewright.dataflow_sim.mesh.flit_sim` predicts the result cycle by
cycle. Limits of this RTL (each raises :class:`~tilewright.compiler.errors.MeshMappingError`
naming the phase): more route ids than a core holds, at most two injection and two ejection lanes
per tile and phase, streaming chain reductions only through every core they pass (``stages`` =
hops: each core adds its words to the stream in its eject stage; a K-tree root may take both
halves at once), int8 operands with the block's K a multiple of the flit's lanes, and the
model's ``comm + compute`` (non-overlapped) phases only with one of the two empty.

Data layout in a tile's SRAM (words of one flit, ``L`` int8 lanes, element 0 in the LSBs):
A-like operands row-major with K packed (word ``i*kw + kc`` holds ``A[i, L*kc : L*kc+L]``),
B-like operands column-major with K packed, C / partial sums one int32 per word, row-major.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from tilewright.arch import ArchSpec
from tilewright.compiler.errors import MeshMappingError
from tilewright.compiler.mesh_isa import (LANE_BITS, MAX_RTL_TILES, N_LANES, OUTPUTS, STEP,
                                          addr_bits, encode_instruction, mesh_params)
from tilewright.compiler.mesh_ops import gemm_program, gemv_program
from tilewright.compiler.mesh_schedule import (MeshScheduleError, gemm_steps, healthy_grid,
                                               interleaved_ring)
from tilewright.compiler.program import MeshPhaseTask, Program

__all__ = ["MeshJob", "xy_path", "gemv_job", "gemm_job", "pack_int8", "unpack_int32"]


def xy_path(sr: int, sc: int, dr: int, dc: int) -> list[tuple[int, int, str]]:
    """Dimension-order XY route: the (row, col, side it leaves by) of every hop, X first."""
    out, r, c = [], sr, sc
    while c != dc:
        side = "e" if dc > c else "w"
        out.append((r, c, side))
        c += STEP[side][1]
    while r != dr:
        side = "s" if dr > r else "n"
        out.append((r, c, side))
        r += STEP[side][0]
    return out


def pack_int8(x: np.ndarray, lanes: int) -> np.ndarray:
    """int8 values (length a multiple of ``lanes``) -> words of ``lanes`` lanes (uint64)."""
    b = np.ascontiguousarray(np.asarray(x, np.int8).ravel()).view(np.uint8).astype(np.uint64)
    return (b.reshape(-1, lanes) << (LANE_BITS * np.arange(lanes, dtype=np.uint64))).sum(axis=1)


def unpack_int32(words) -> np.ndarray:
    """SRAM words -> int32 (the low 32 bits, two's complement)."""
    return (np.asarray(words, np.uint64) & 0xFFFFFFFF).astype(np.uint32).view(np.int32)


@dataclass
class MeshJob:
    """Everything the bench needs for one run: SRAM loads, per-tile instructions, reads.

    ``loads``: (tile index, word address, uint64 words); ``instrs[t]``: one int per phase;
    ``reads``: name -> list of (tile index, word address, words); ``messages``: per phase, the
    (sr, sc, dr, dc, flits, stages) messages programmed (for cross-checks); ``fields``: per
    phase, every tile's instruction fields (tile index order) — what
    :mod:`tilewright.dataflow_sim.mesh.flit_sim` simulates."""

    rows: int
    cols: int
    n_phases: int
    loads: list[tuple[int, int, np.ndarray]] = field(default_factory=list)
    instrs: list[list[int]] = field(default_factory=list)
    reads: dict[str, list[tuple[int, int, int]]] = field(default_factory=dict)
    messages: list[list[tuple[int, int, int, int, int]]] = field(default_factory=list)
    phase_names: list[str] = field(default_factory=list)
    fields: list[list[dict[str, int]]] = field(default_factory=list)


@dataclass
class _Send:
    """One injection: ``count`` words from ``base`` at ``src`` on lane ``lane``, along ``legs``
    (farthest destination, multicast, eject base, add). ``chain``: a streaming chain-reduction
    (one leg; every tile after the source adds its word at ``base`` and forwards on its lane
    ``chain[i]``, the destination adds into ``base``)."""

    src: tuple[int, int]
    lane: int
    base: int
    count: int
    legs: list[tuple[tuple[int, int], bool, int, bool]]
    chain: list[int] | None = None


class _PhaseBuilder:
    """Instruction fields of every tile for one phase, with the RTL's resource checks, its
    ejection lanes and its route ids (:meth:`route`)."""

    def __init__(self, rows: int, cols: int, name: str):
        self.rows, self.cols, self.name = rows, cols, name
        self.f = [[{} for _ in range(cols)] for _ in range(rows)]
        self.messages: list[tuple[int, ...]] = []
        self.sends: list[_Send] = []
        self._inj: dict[tuple[int, int], set[int]] = {}
        self._ej_fixed: dict[tuple[int, int], set[int]] = {}

    def _inj_lane(self, tile: tuple[int, int], also_ej: bool = False) -> int:
        used = self._inj.setdefault(tile, set())
        fixed = self._ej_fixed.setdefault(tile, set())
        for k in range(N_LANES):
            if k not in used and not (also_ej and k in fixed):
                used.add(k)
                if also_ej:
                    fixed.add(k)
                return k
        raise MeshMappingError(f"phase {self.name!r}: tile {tile} needs a third inj lane; "
                               "the RTL mesh has 2 injection and 2 ejection lanes per tile")

    def send(self, src: tuple[int, int], base: int, count: int,
             legs: list[tuple[tuple[int, int], bool, int, int]]) -> None:
        """One injection of ``count`` words from ``base`` at ``src``, along ``legs``: (farthest
        destination, multicast: every tile passed also receives, eject base, add)."""
        src = tuple(src)
        self.sends.append(_Send(src, self._inj_lane(src), base, count, list(legs)))
        for (dr, dc), *_ in legs:
            self.messages.append((src[0], src[1], dr, dc, count, 1))

    def chain(self, src: tuple[int, int], dst: tuple[int, int], base: int, count: int) -> None:
        """A streaming chain-reduction of ``count`` int32 words at ``base`` from ``src`` to
        ``dst``: every tile passed adds its words to the stream (stages = hops)."""
        src, dst = tuple(src), tuple(dst)
        path = xy_path(*src, *dst)
        lane = self._inj_lane(src)
        mids = [(r + STEP[sd][0], c + STEP[sd][1]) for r, c, sd in path[:-1]]
        lanes = [self._inj_lane(t, also_ej=True) for t in mids]
        self.sends.append(_Send(src, lane, base, count, [(dst, False, base, True)], lanes))
        self.messages.append((src[0], src[1], dst[0], dst[1], count, len(path)))

    def mac(self, r: int, c: int, a: int, b: int, cc: int, mt: int, nt: int, kw: int) -> None:
        self.f[r][c].update(mac_a=a, mac_b=b, mac_c=cc, mac_mt=mt, mac_nt=nt, mac_kw=kw)

    def _segments(self, s: _Send, lanes: dict) -> list[tuple[tuple[int, int], int, dict]]:
        """The colour segments of a send: (injecting tile, injection lane, {tile: route bits}).
        A plain send (multicast legs included) is one segment; a chain has one per stage (each
        stage tile ejects on its chain lane and re-injects a new colour on that lane).
        ``lanes``: (tile, send id, leg) -> ejection lane."""
        segs, tile, lane, ent = [], s.src, s.lane, {}
        for li, ((dr, dc), multicast, _, _) in enumerate(s.legs):
            path = xy_path(s.src[0], s.src[1], dr, dc)
            for h, (r, c, side) in enumerate(path):
                ent[(r, c)] = ent.get((r, c), 0) | (1 << OUTPUTS.index(side))
                nxt = (r + STEP[side][0], c + STEP[side][1])
                last = h == len(path) - 1
                if last or multicast or s.chain is not None:
                    k = lanes[(nxt, id(s), li)]
                    ent[nxt] = ent.get(nxt, 0) | (1 << OUTPUTS.index(f"ej{k}"))
                    if s.chain is not None and not last:
                        segs.append((tile, lane, ent))
                        tile, lane, ent = nxt, s.chain[h], {}
        segs.append((tile, lane, ent))
        return segs

    def route(self, routes: int) -> None:
        """Ejection lanes, route ids (colours) and route tables. Every tile a message reaches
        gets an ejection lane (a chain stage keeps the lane it re-injects on); every colour
        segment (:meth:`_segments`) gets the smallest colour free at every tile it touches; the
        routers arbitrate at run time, so nothing here delays or orders the messages."""
        arrivals: dict[tuple[int, int], list] = {}
        for s in self.sends:
            for li, ((dr, dc), multicast, ebase, add) in enumerate(s.legs):
                path = xy_path(s.src[0], s.src[1], dr, dc)
                for h, (r, c, side) in enumerate(path):
                    nxt = (r + STEP[side][0], c + STEP[side][1])
                    last = h == len(path) - 1
                    if last or multicast or s.chain is not None:
                        chain = None if last or s.chain is None else s.chain[h]
                        arrivals.setdefault(nxt, []).append((s, li, ebase, add and chain is None,
                                                             chain))
        lanes: dict[tuple, int] = {}
        for (r, c), arr in arrivals.items():
            if len(arr) > N_LANES:
                raise MeshMappingError(f"phase {self.name!r}: tile ({r}, {c}) needs a third ej "
                                       "lane; the RTL mesh has 2 injection and 2 ejection lanes "
                                       "per tile")
            fixed = {e[4] for e in arr if e[4] is not None}
            free = iter(k for k in range(N_LANES) if k not in fixed)
            for s, li, ebase, add, chain in arr:
                k = chain if chain is not None else next(free)
                lanes[((r, c), id(s), li)] = k
                self.f[r][c].update({f"ej{k}_base": ebase, f"ej{k}_count": s.count,
                                     f"ej{k}_add": int(add), f"chain{k}": int(chain is not None)})
        used: dict[tuple[int, int], set[int]] = {}
        for s in self.sends:
            t = self.f[s.src[0]][s.src[1]]
            t.update({f"inj{s.lane}_base": s.base, f"inj{s.lane}_count": s.count})
            for tile, lane, ent in self._segments(s, lanes):
                taken = set().union(*(used.get(x, set()) for x in (tile, *ent)))
                color = min(set(range(routes + 1)) - taken)
                if color >= routes:
                    worst = max((tile, *ent), key=lambda x: len(used.get(x, ())))
                    raise MeshMappingError(
                        f"phase {self.name!r}: a message from {s.src} needs a route id free at "
                        f"every core it touches, and core {worst} already holds "
                        f"{len(used.get(worst, ()))}; mesh.max_routes_per_core = {routes} "
                        "(raise it, or split the phase)")
                self.f[tile[0]][tile[1]][f"inj{lane}_color"] = color
                for x in (tile, *ent):
                    used.setdefault(x, set()).add(color)
                for (r, c), bits in ent.items():
                    self.f[r][c][f"route_{color}"] = bits

    def encode(self, addr_bits: int, routes: int) -> list[int]:
        return [encode_instruction(addr_bits, routes, **self.f[r][c])
                for r in range(self.rows) for c in range(self.cols)]


def _task_messages(task: MeshPhaseTask, program: Program, link_bytes: int,
                   rep: int | None = None) -> list[tuple[int, ...]]:
    """The task's messages as sorted (sr, sc, dr, dc, flits, stages), flits = ceil(bytes /
    link bytes); ``rep``: only those that run in repeat ``rep`` (``times`` < 0 or > rep)."""
    if task.flows is None:
        return []
    arr = np.asarray(program.constants[task.flows], np.int64).reshape(-1, 6)
    nbytes = np.repeat(np.asarray(task.flow_bytes, np.int64),
                       np.asarray(task.flow_counts, np.int64))
    keep = np.ones(len(arr), bool) if rep is None else (arr[:, 5] < 0) | (arr[:, 5] > rep)
    flits = -(-nbytes // link_bytes)
    return sorted(zip(*(arr[keep, i].tolist() for i in range(4)), flits[keep].tolist(),
                      arr[keep, 4].tolist()))


def _finish(job: MeshJob, builders: list[_PhaseBuilder], model: list[list[tuple]],
            p: dict) -> MeshJob:
    ntile = job.rows * job.cols
    job.instrs = [[] for _ in range(ntile)]
    for b, want in zip(builders, model):
        if sorted(b.messages) != want:
            raise AssertionError(f"phase {b.name!r}: RTL messages {sorted(b.messages)} differ "
                                 f"from the Program's flows {want}")
        b.route(p["routes"])
        for t, w in enumerate(b.encode(p["addr_bits"], p["routes"])):
            job.instrs[t].append(w)
        job.messages.append(sorted(b.messages))
        job.phase_names.append(b.name)
        job.fields.append([dict(b.f[r][c]) for r in range(b.rows) for c in range(b.cols)])
    job.n_phases = len(builders)
    return job


def _check_arch(arch: ArchSpec) -> dict:
    if arch.mesh is not None and arch.mesh.cores > MAX_RTL_TILES:
        raise MeshMappingError(f"{arch.name}: the RTL mesh is built for at most {MAX_RTL_TILES} "
                               f"tiles; mesh {arch.mesh.rows}x{arch.mesh.cols} has "
                               f"{arch.mesh.cores} (use a small preset such as mesh4x4)")
    if arch.mesh is not None and arch.mesh.repairs_defects:   # never ignore the spares
        raise MeshMappingError(f"{arch.name}: mesh spare_rows = {arch.mesh.spare_rows}, "
                               f"spare_cols = {arch.mesh.spare_cols}: the RTL mesh has no spare "
                               "remap; accepted: a mesh without spares for --rtl")
    try:
        p = mesh_params(arch)
    except ValueError as exc:       # a user error at this level: the mesh the ArchSpec asks for
        raise MeshMappingError(str(exc)) from None
    return {**p, "addr_bits": addr_bits(p["sram_words"])}


def _kw(k_block: int, lanes: int, what: str) -> int:
    if k_block % lanes:
        raise MeshMappingError(f"{what}: the per-core K block ({k_block}) must be a multiple of "
                               f"the flit's {lanes} int8 lanes in the RTL mesh")
    return k_block // lanes


def _op_meta(program: Program, op: str, **want) -> dict:
    """``program.meta["mesh_op"]`` checked against the op and shape the caller runs."""
    meta = program.meta.get("mesh_op")
    if not meta or meta.get("op") != op:
        raise MeshMappingError(f"program {program.name}: not a single-{op} mesh Program (its "
                               "meta has no mesh_op of that kind; emit it with "
                               f"tilewright.compiler.mesh_ops.{op}_program)")
    for key, v in want.items():
        if meta.get(key) != v:
            raise MeshMappingError(f"program {program.name}: mesh_op {key} = {meta.get(key)!r} "
                                   f"but the operands need {v!r}")
    if meta.get("elem_bytes") != 1 or meta.get("acc_bytes") != 4:
        raise MeshMappingError(f"program {program.name}: the RTL mesh runs int8 operands with "
                               "int32 results (elem_bytes 1, acc_bytes 4)")
    if program.meta.get("defects", "skip") != "skip":
        raise MeshMappingError(f"program {program.name}: the RTL mesh has no defects to route "
                               "around; emit the Program with defects='skip'")
    return meta


def _spec_name(task: MeshPhaseTask, i: int) -> str:
    """The schedule's phase name inside the task name ``'{op} #{i} {phase}'``."""
    prefix = f"{task.op} #{i} "
    return task.name[len(prefix):] if task.name.startswith(prefix) else task.name


def _wrap(fn, *args, **kw):
    try:
        return fn(*args, **kw)
    except MeshScheduleError as exc:
        raise MeshMappingError(str(exc)) from None


def gemv_job(arch: ArchSpec, x: np.ndarray, w: np.ndarray, *, levels: int = 2,
             group: int | None = None, program: Program | None = None
             ) -> tuple[MeshJob, Program]:
    """MeshGEMV (K-tree all-reduce, x broadcast along rows) of int8 ``x[K] @ w[K, N]`` on the
    whole mesh, from the mesh Program of :func:`~tilewright.compiler.mesh_ops.gemv_program`
    (emitted here unless given). Returns the job (reads: ``y`` block of every tile) and the
    Program."""
    p = _check_arch(arch)
    L = p["lanes"]
    k, n = w.shape
    if program is None:
        program = _wrap(gemv_program, arch, k, n, levels=levels, group=group)
    meta = _op_meta(program, "gemv", k=k, n=n)
    if meta["algo"] != "mesh":
        raise MeshMappingError(f"gemv algo {meta['algo']!r}: the RTL mesh runs 'mesh' (K-tree)")
    grid = healthy_grid(arch.mesh)
    pr, pc, kt, nt = meta["pr"], meta["pc"], meta["kt"], meta["nt"]
    if (pr, pc) != (grid.pr, grid.pc):
        raise MeshMappingError(f"program {program.name}: grid {pr}x{pc} is not {arch.name}'s "
                               f"healthy {grid.pr}x{grid.pc}")
    kw = _kw(kt, L, f"gemv k={k} on {pr} rows")
    xa, wa, ya = 0, kw, kw + nt * kw
    if ya + nt > p["sram_words"]:
        raise MeshMappingError(f"gemv k={k} n={n}: needs {ya + nt} words per tile, SRAM holds "
                               f"{p['sram_words']}")
    job = MeshJob(arch.mesh.rows, arch.mesh.cols, 0)
    C = arch.mesh.cols
    xp = np.zeros(pr * kt, np.int8); xp[:k] = np.asarray(x).ravel()
    wp = np.zeros((pr * kt, pc * nt), np.int8); wp[:k, :n] = w
    for i in range(pr):
        for j in range(pc):
            t = int(grid.rows[i]) * C + int(grid.cols[j])
            blk = wp[i * kt:(i + 1) * kt, j * nt:(j + 1) * nt]
            job.loads.append((t, wa, pack_int8(blk.T, L)))      # column-major, K packed
            job.loads.append((t, ya, np.zeros(nt, np.uint64)))
            if j == pc // 2 or pc == 1:
                job.loads.append((t, xa, pack_int8(xp[i * kt:(i + 1) * kt], L)))
    job.reads["y"] = [(int(grid.rows[i]) * C + int(grid.cols[j]), ya, nt)
                      for i in range(pr) for j in range(pc)]
    builders, model = [], []
    for ti, task in enumerate(program.tasks):
        name = _spec_name(task, ti)
        b = _PhaseBuilder(job.rows, job.cols, name)
        want = _task_messages(task, program, L)
        if task.repeat != 1 or task.vector_ops_per_core:
            raise MeshMappingError(f"task {task.name!r}: repeat / vector work not expected in "
                                   "a gemv")
        if name.startswith("broadcast"):
            by_src: dict[tuple[int, int], list] = {}
            base = xa if "x" in name.split()[1] else ya
            for sr, sc, dr, dc, fl, _ in want:
                by_src.setdefault((sr, sc), []).append(((dr, dc), True, base, False))
            for src, legs in by_src.items():
                b.send(src, base, want[0][4], legs)
        elif name.startswith("k-tree"):
            for sr, sc, dr, dc, fl, st in want:
                hops = abs(dr - sr) + abs(dc - sc)
                if st == 1:
                    b.send((sr, sc), ya, fl, [((dr, dc), False, ya, True)])
                elif st == hops:
                    b.chain((sr, sc), (dr, dc), ya, fl)
                else:
                    raise MeshMappingError(f"phase {name!r}: a chain reduction of {st} stages "
                                           f"over {hops} hops; the RTL mesh streams through "
                                           "every core it passes (stages = hops)")
        elif name == "local gemv":
            if task.macs_per_core != kt * nt:
                raise AssertionError(f"task {task.name!r}: {task.macs_per_core} MACs per core, "
                                     f"the RTL block does {kt * nt}")
            for i in grid.rows:
                for j in grid.cols:
                    b.mac(int(i), int(j), xa, wa, ya, 1, nt, kw)
        else:
            raise MeshMappingError(f"phase {name!r}: not implemented in the RTL mesh")
        if name != "local gemv" and task.macs_per_core:
            raise MeshMappingError(f"phase {name!r}: compute with messages not expected")
        builders.append(b)
        model.append(want)
    return _finish(job, builders, model, p), program


def gemm_job(arch: ArchSpec, a: np.ndarray, b: np.ndarray, *, algo: str = "mesh",
             program: Program | None = None) -> tuple[MeshJob, Program]:
    """Distributed GEMM of int8 ``a[M, K] @ b[K, N]`` on the largest square grid of the mesh,
    from the mesh Program of :func:`~tilewright.compiler.mesh_ops.gemm_program` (emitted here
    unless given): ``algo`` = ``mesh`` (MeshGEMM: Cannon on the interleaved ring), ``cannon``
    or ``summa`` (row/column multicasts into double-buffered receive blocks). The Program's
    tasks give every phase's messages, MACs, repeat and overlap; the schedule's steps
    (:func:`~tilewright.compiler.mesh_schedule.gemm_steps`) say which buffer each message
    carries. Returns the job (reads: ``C`` block per logical core, logical row-major order) and
    the Program."""
    p = _check_arch(arch)
    L = p["lanes"]
    m, k = a.shape
    n = b.shape[1]
    if program is None:
        program = _wrap(gemm_program, arch, m, k, n, algo=algo)
    meta = _op_meta(program, "gemm", m=m, k=k, n=n)
    algo = meta["algo"]
    grid = healthy_grid(arch.mesh, square=True)
    P = grid.pr
    if meta["p"] != P:
        raise MeshMappingError(f"program {program.name}: grid {meta['p']}x{meta['p']} is not "
                               f"{arch.name}'s healthy {P}x{P}")
    mt, kt, nt = meta["mt"], meta["kt"], meta["nt"]
    kw = _kw(kt, L, f"gemm k={k} on a {P}x{P} grid")
    steps = _wrap(gemm_steps, algo, P, align=meta["align"])
    if len(steps) != len(program.tasks):
        raise AssertionError(f"program {program.name}: {len(program.tasks)} tasks for "
                             f"{len(steps)} schedule steps")
    aw, bw = mt * kw, nt * kw
    words = {"A": aw, "B": bw}
    # own A, B at slot 0 of their buffer; a second slot per buffer for double buffering
    # (Cannon-style shifts) or two receive slots "Ab"/"Bb" (SUMMA multicasts)
    base = {"A": 0, "B": 3 * aw}
    slots = {"A": (0, aw), "B": (3 * aw, 3 * aw + bw), "Ab": (aw, 2 * aw),
             "Bb": (3 * aw + bw, 3 * aw + 2 * bw)}
    ca = 3 * aw + 3 * bw
    if ca + mt * nt > p["sram_words"]:
        raise MeshMappingError(f"gemm {m}x{k}x{n}: needs {ca + mt * nt} words per tile, SRAM "
                               f"holds {p['sram_words']}")
    place = interleaved_ring(P) if algo == "mesh" else np.arange(P)
    pr_, pc_ = grid.rows[place], grid.cols[place]
    C = arch.mesh.cols
    job = MeshJob(arch.mesh.rows, arch.mesh.cols, 0)
    ap = np.zeros((P * mt, P * kt), np.int8); ap[:m, :k] = a
    bp = np.zeros((P * kt, P * nt), np.int8); bp[:k, :n] = b
    tile = lambda u, v: int(pr_[u]) * C + int(pc_[v])        # noqa: E731
    for u in range(P):
        for v in range(P):
            t = tile(u, v)
            job.loads.append((t, base["A"],
                              pack_int8(ap[u * mt:(u + 1) * mt, v * kt:(v + 1) * kt], L)))
            job.loads.append((t, base["B"],
                              pack_int8(bp[u * kt:(u + 1) * kt, v * nt:(v + 1) * nt].T, L)))
            job.loads.append((t, ca, np.zeros(mt * nt, np.uint64)))
    job.reads["C"] = [(tile(u, v), ca, mt * nt) for u in range(P) for v in range(P)]
    # word address of the block each logical core currently holds, per buffer name
    cur = {"A": np.full((P, P), base["A"]), "B": np.full((P, P), base["B"]),
           "Ab": np.full((P, P), -1), "Bb": np.full((P, P), -1)}
    builders, model = [], []
    for si, (st, task) in enumerate(zip(steps, program.tasks)):
        macs = mt * kt * nt if st.operands is not None else 0
        if (task.repeat, task.overlap, task.macs_per_core) != (st.repeat, st.overlap, macs):
            raise AssertionError(f"task {task.name!r}: repeat/overlap/MACs "
                                 f"{(task.repeat, task.overlap, task.macs_per_core)} differ from "
                                 f"the RTL's step {(st.repeat, st.overlap, macs)}")
        if st.operands is not None and st.moves and not st.overlap:
            raise MeshMappingError(f"phase {st.name!r}: non-overlapped comm + compute is not "
                                   "implemented in the RTL mesh")
        for rep in range(st.repeat):
            bl = _PhaseBuilder(job.rows, job.cols, f"{st.name} #{rep}")
            new: dict[str, np.ndarray] = {}
            for mv in st.moves:
                into = mv.into or mv.buf
                nxt = new.setdefault(into, cur[into].copy())
                if mv.kind == "shift":
                    _shift(bl, mv, rep, P, pr_, pc_, cur[mv.buf], cur[into], nxt, slots[into],
                           words[mv.buf])
                elif mv.kind in ("bcast_row", "bcast_col"):
                    _bcast(bl, mv, P, pr_, pc_, grid, cur[mv.buf], nxt, slots[into][si % 2],
                           words[mv.buf])
                else:
                    raise MeshMappingError(f"move kind {mv.kind!r}: not in the RTL mesh")
            if st.operands is not None:
                x, y = st.operands
                for u in range(P):
                    for v in range(P):
                        bl.mac(int(pr_[u]), int(pc_[v]), int(cur[x][u, v]), int(cur[y][u, v]),
                               ca, mt, nt, kw)
            cur.update(new)
            builders.append(bl)
            model.append(_task_messages(task, program, L, rep))
    return _finish(job, builders, model, p), program


def _shift(bl: _PhaseBuilder, mv, rep: int, P: int, pr_, pc_, src_addr, dst_addr, nxt,
           slots: tuple[int, int], nwords: int) -> None:
    """One unicast per receiving core, into the slot of its buffer it is not reading."""
    for u in range(P):
        for v in range(P):
            if mv.count is not None and mv.count[u, v] <= rep:
                continue
            su, sv = int(mv.src_u[u, v]), int(mv.src_v[u, v])
            src, dst = (int(pr_[su]), int(pc_[sv])), (int(pr_[u]), int(pc_[v]))
            if src == dst:
                raise MeshMappingError("a local move: not in the RTL mesh bench")
            free = slots[1] if dst_addr[u, v] == slots[0] else slots[0]
            bl.send(src, int(src_addr[su, sv]), nwords, [(dst, False, free, False)])
            nxt[u, v] = free


def _bcast(bl: _PhaseBuilder, mv, P: int, pr_, pc_, grid, src_addr, nxt, slot: int,
           nwords: int) -> None:
    """One multicast per line from its source, both ways to the line's ends; every core passed
    receives into ``slot``; the source keeps using its own block (no copy)."""
    row = mv.kind == "bcast_row"
    for line in range(P):
        su, sv = (line, int(mv.src_v[line, 0])) if row else (int(mv.src_u[0, line]), line)
        src = (int(pr_[su]), int(pc_[sv]))
        if row:
            ends = [(src[0], int(grid.cols.min())), (src[0], int(grid.cols.max()))]
        else:
            ends = [(int(grid.rows.min()), src[1]), (int(grid.rows.max()), src[1])]
        legs = [(e, True, slot, False) for e in ends if e != src]
        if legs:
            bl.send(src, int(src_addr[su, sv]), nwords, legs)
        for q in range(P):
            uu, vv = (line, q) if row else (q, line)
            nxt[uu, vv] = src_addr[su, sv] if (uu, vv) == (su, sv) else slot


def transfer_job(arch: ArchSpec, program: Program, *, seed: int = 0
                 ) -> tuple[MeshJob, dict[str, np.ndarray]]:
    """A job for a Program of pure message phases (``mesh_phase`` tasks without work): every
    message copies ``flits`` seeded random words from a region of its source's SRAM into a
    fresh region of its destination's (a multicast's farthest receiver stands for the line:
    one flow either way in the model). ``repeat`` runs each task that many times (messages
    filtered by ``times``). Returns the job (reads: one region per message) and the words each
    read must hold."""
    p = _check_arch(arch)
    L = p["lanes"]
    rng = np.random.default_rng(seed)
    rows, cols = arch.mesh.rows, arch.mesh.cols
    job = MeshJob(rows, cols, 0)
    top = np.zeros((rows, cols), np.int64)           # next free word per tile
    expect: dict[str, np.ndarray] = {}
    builders, model = [], []

    def alloc(r: int, c: int, n: int) -> int:
        at = int(top[r, c])
        top[r, c] += n
        if top[r, c] > p["sram_words"]:
            raise MeshMappingError(f"program {program.name}: tile ({r}, {c}) needs more than "
                                   f"its {p['sram_words']} SRAM words for the transfers")
        return at

    for ti, task in enumerate(program.tasks):
        if not isinstance(task, MeshPhaseTask):
            raise MeshMappingError(f"task {task.name}: a {task.kind!r} task; the RTL mesh runs "
                                   "'mesh_phase' tasks")
        if task.macs_per_core or task.vector_ops_per_core:
            raise MeshMappingError(f"task {task.name!r}: has compute; transfer_job runs message "
                                   "phases only (use gemm_job / gemv_job)")
        for rep in range(task.repeat):
            name = f"{_spec_name(task, ti)} #{rep}" if task.repeat > 1 else _spec_name(task, ti)
            b = _PhaseBuilder(rows, cols, name)
            want = _task_messages(task, program, L, rep if task.repeat > 1 else None)
            for i, (sr, sc, dr, dc, fl, st) in enumerate(want):
                if st != 1:
                    raise MeshMappingError(f"phase {name!r}: a chain reduction (stages {st}) "
                                           "is not a transfer; transfer_job copies messages")
                words = rng.integers(0, 1 << min(LANE_BITS * L, 63), fl, dtype=np.uint64)
                src, dst = alloc(sr, sc, fl), alloc(dr, dc, fl)
                t_src, t_dst = sr * cols + sc, dr * cols + dc
                job.loads.append((t_src, src, words))
                key = f"{name}: {i}"
                job.reads[key] = [(t_dst, dst, fl)]
                expect[key] = words
                b.send((sr, sc), src, fl, [((dr, dc), False, dst, False)])
            builders.append(b)
            model.append(want)
    return _finish(job, builders, model, p), expect
