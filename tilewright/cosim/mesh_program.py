"""Per-tile phase programs for the RTL mesh, derived from the mesh model's own schedules.

The RTL mesh (:mod:`tilewright.rtl.mesh`) runs a list of phases; in each, every tile injects,
ejects (write or add) and multiplies as its instruction says. This module turns the *same*
schedules the mesh model costs — :func:`~tilewright.dataflow_sim.mesh.gemv.gemv_phases` with
:func:`~tilewright.dataflow_sim.mesh.gemv.ktree_plan` for MeshGEMV, and
:func:`~tilewright.dataflow_sim.mesh.gemm.gemm_steps` / ``gemm_phases`` for MeshGEMM, Cannon
and SUMMA — into those instructions, and checks message by message that the RTL messages of
every phase are exactly the model phase's :class:`~tilewright.dataflow_sim.mesh.model.Flows`
(source, destination, flits).

Routes are dimension-order XY (:func:`xy_path`). Limits of this RTL (each raises
:class:`~tilewright.dataflow_sim.mesh.model.MeshMappingError` naming the phase): one flow per
directed link per phase, at most two injection and two ejection lanes per tile and phase, no
streaming chain reduction (``stages`` must be 1; a K-tree root may take both halves at once),
int8 operands with the block's K a multiple
of the flit's lanes, and the model's ``comm + compute`` (non-overlapped) phases only with one of
the two empty.

Data layout in a tile's SRAM (words of one flit, ``L`` int8 lanes, element 0 in the LSBs):
A-like operands row-major with K packed (word ``i*kw + kc`` holds ``A[i, L*kc : L*kc+L]``),
B-like operands column-major with K packed, C / partial sums one int32 per word, row-major.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from tilewright.arch import ArchSpec
from tilewright.dataflow_sim.mesh.gemm import gemm_phases, gemm_steps, interleaved_ring
from tilewright.dataflow_sim.mesh.gemv import gemv_phases
from tilewright.dataflow_sim.mesh.grid import healthy_grid
from tilewright.dataflow_sim.mesh.model import Flows, MeshMappingError, Phase
from tilewright.rtl.mesh import mesh_params
from tilewright.rtl.mesh_router import SEL_INJ, SIDES
from tilewright.rtl.mesh_tile import encode_instruction

__all__ = ["MeshJob", "xy_path", "gemv_job", "gemm_job", "pack_int8", "unpack_int32"]

_STEP = {"n": (-1, 0), "s": (1, 0), "e": (0, 1), "w": (0, -1)}
_OPP = {"n": "s", "s": "n", "e": "w", "w": "e"}


def xy_path(sr: int, sc: int, dr: int, dc: int) -> list[tuple[int, int, str]]:
    """Dimension-order XY route: the (row, col, side it leaves by) of every hop, X first."""
    out, r, c = [], sr, sc
    while c != dc:
        side = "e" if dc > c else "w"
        out.append((r, c, side))
        c += _STEP[side][1]
    while r != dr:
        side = "s" if dr > r else "n"
        out.append((r, c, side))
        r += _STEP[side][0]
    return out


def pack_int8(x: np.ndarray, lanes: int) -> np.ndarray:
    """int8 values (length a multiple of ``lanes``) -> words of ``lanes`` lanes (uint64)."""
    b = np.ascontiguousarray(np.asarray(x, np.int8).ravel()).view(np.uint8).astype(np.uint64)
    return (b.reshape(-1, lanes) << (8 * np.arange(lanes, dtype=np.uint64))).sum(axis=1)


def unpack_int32(words) -> np.ndarray:
    """SRAM words -> int32 (the low 32 bits, two's complement)."""
    return (np.asarray(words, np.uint64) & 0xFFFFFFFF).astype(np.uint32).view(np.int32)


@dataclass
class MeshJob:
    """Everything the bench needs for one run: SRAM loads, per-tile instructions, reads.

    ``loads``: (tile index, word address, uint64 words); ``instrs[t]``: one int per phase;
    ``reads``: name -> list of (tile index, word address, words); ``messages``: per phase, the
    (sr, sc, dr, dc, flits) messages programmed (for cross-checks)."""

    rows: int
    cols: int
    n_phases: int
    loads: list[tuple[int, int, np.ndarray]] = field(default_factory=list)
    instrs: list[list[int]] = field(default_factory=list)
    reads: dict[str, list[tuple[int, int, int]]] = field(default_factory=dict)
    messages: list[list[tuple[int, int, int, int, int]]] = field(default_factory=list)
    phase_names: list[str] = field(default_factory=list)


class _PhaseBuilder:
    """Instruction fields of every tile for one phase, with the RTL's resource checks."""

    def __init__(self, rows: int, cols: int, name: str):
        self.rows, self.cols, self.name = rows, cols, name
        self.f = [[{} for _ in range(cols)] for _ in range(rows)]
        self.messages: list[tuple[int, int, int, int, int]] = []

    def _lane(self, r: int, c: int, kind: str) -> int:
        t = self.f[r][c]
        for k in range(2):
            if f"{kind}{k}_count" not in t:
                return k
        raise MeshMappingError(f"phase {self.name!r}: tile ({r}, {c}) needs a third {kind} lane; "
                               "the RTL mesh has 2 injection and 2 ejection lanes per tile")

    def _set(self, r: int, c: int, key: str, val: int) -> None:
        t = self.f[r][c]
        if key in t and t[key] != val:
            raise MeshMappingError(f"phase {self.name!r}: tile ({r}, {c}) {key} used by two flows "
                                   "(the RTL mesh carries one flow per directed link per phase)")
        t[key] = val

    def send(self, src: tuple[int, int], base: int, count: int,
             legs: list[tuple[tuple[int, int], bool, int, int]]) -> None:
        """One injection of ``count`` words from ``base`` at ``src``, along ``legs``: (farthest
        destination, multicast: every tile passed also receives, eject base, add)."""
        sr, sc = src
        k = self._lane(sr, sc, "inj")
        self.f[sr][sc].update({f"inj{k}_base": base, f"inj{k}_count": count})
        for (dr, dc), multicast, ebase, add in legs:
            path = xy_path(sr, sc, dr, dc)
            self.messages.append((sr, sc, dr, dc, count))
            prev = SEL_INJ + k
            for hop, (r, c, side) in enumerate(path):
                self._set(r, c, f"o_sel_{side}", prev)
                nr, nc = r + _STEP[side][0], c + _STEP[side][1]
                code = SIDES.index(_OPP[side]) + 1
                last = hop == len(path) - 1
                if last or multicast:
                    e = self._lane(nr, nc, "ej")
                    self.f[nr][nc].update({f"ej{e}_sel": code, f"ej{e}_base": ebase,
                                           f"ej{e}_count": count, f"ej{e}_add": int(add)})
                prev = code

    def mac(self, r: int, c: int, a: int, b: int, cc: int, mt: int, nt: int, kw: int) -> None:
        self.f[r][c].update(mac_a=a, mac_b=b, mac_c=cc, mac_mt=mt, mac_nt=nt, mac_kw=kw)

    def encode(self, addr_bits: int) -> list[int]:
        return [encode_instruction(addr_bits, **self.f[r][c])
                for r in range(self.rows) for c in range(self.cols)]


def _flows_set(f: Flows | None, rep: int | None = None) -> list[tuple[int, ...]]:
    if f is None or not len(f):
        return []
    keep = np.ones(len(f), bool) if rep is None else (f.times < 0) | (f.times > rep)
    if (f.stages[keep] != 1).any():
        raise MeshMappingError("the RTL mesh has no streaming chain reduction (stages > 1)")
    return sorted(zip(*(getattr(f, a)[keep].tolist()
                        for a in ("sr", "sc", "dr", "dc", "flits"))))


def _finish(job: MeshJob, builders: list[_PhaseBuilder], model: list[list[tuple]],
            addr_bits: int) -> MeshJob:
    ntile = job.rows * job.cols
    job.instrs = [[] for _ in range(ntile)]
    for b, want in zip(builders, model):
        if sorted(b.messages) != want:
            raise AssertionError(f"phase {b.name!r}: RTL messages {sorted(b.messages)} differ "
                                 f"from the model's flows {want}")
        for t, w in enumerate(b.encode(addr_bits)):
            job.instrs[t].append(w)
        job.messages.append(sorted(b.messages))
        job.phase_names.append(b.name)
    job.n_phases = len(builders)
    return job


#: the RTL mesh is for small meshes (its Verilog and Verilator build grow with the tile count)
MAX_RTL_TILES = 64


def _check_arch(arch: ArchSpec) -> dict:
    if arch.mesh is not None and arch.mesh.cores > MAX_RTL_TILES:
        raise MeshMappingError(f"{arch.name}: the RTL mesh is built for at most {MAX_RTL_TILES} "
                               f"tiles; mesh {arch.mesh.rows}x{arch.mesh.cols} has "
                               f"{arch.mesh.cores} (use a small preset such as mesh4x4)")
    try:
        p = mesh_params(arch)
    except ValueError as exc:       # a user error at this level: the mesh the ArchSpec asks for
        raise MeshMappingError(str(exc)) from None
    return {**p, "addr_bits": max(1, (p["sram_words"] - 1).bit_length())}


def _kw(k_block: int, lanes: int, what: str) -> int:
    if k_block % lanes:
        raise MeshMappingError(f"{what}: the per-core K block ({k_block}) must be a multiple of "
                               f"the flit's {lanes} int8 lanes in the RTL mesh")
    return k_block // lanes


def gemv_job(arch: ArchSpec, x: np.ndarray, w: np.ndarray, *, levels: int = 2,
             group: int | None = None) -> tuple[MeshJob, list[Phase]]:
    """MeshGEMV (K-tree all-reduce, x broadcast along rows) of int8 ``x[K] @ w[K, N]`` on the
    whole mesh. Returns the job (reads: ``y`` block of every tile) and the model's phases."""
    p = _check_arch(arch)
    L = p["lanes"]
    grid = healthy_grid(arch.mesh)
    pr, pc = grid.pr, grid.pc
    k, n = w.shape
    kt, nt = -(-k // pr), -(-n // pc)
    kw = _kw(kt, L, f"gemv k={k} on {pr} rows")
    phases = gemv_phases("mesh", grid, kt, nt, elem_bytes=1, acc_bytes=4,
                         link_bytes=arch.mesh.link_bytes_per_cycle, levels=levels, group=group)
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
    for ph in phases:
        b = _PhaseBuilder(job.rows, job.cols, ph.name)
        want = _flows_set(ph.flows)
        if ph.name.startswith("broadcast"):
            by_src: dict[tuple[int, int], list] = {}
            base = xa if "x" in ph.name.split()[1] else ya
            for sr, sc, dr, dc, fl in want:
                by_src.setdefault((sr, sc), []).append(((dr, dc), True, base, False))
            for src, legs in by_src.items():
                b.send(src, base, want[0][4], legs)
        elif ph.name.startswith("k-tree"):
            for sr, sc, dr, dc, fl in want:
                b.send((sr, sc), ya, fl, [((dr, dc), False, ya, True)])
        elif ph.name == "local gemv":
            for i in grid.rows:
                for j in grid.cols:
                    b.mac(int(i), int(j), xa, wa, ya, 1, nt, kw)
        else:
            raise MeshMappingError(f"phase {ph.name!r}: not implemented in the RTL mesh")
        if ph.repeat != 1:
            raise MeshMappingError(f"phase {ph.name!r}: repeat {ph.repeat} not expected in gemv")
        builders.append(b)
        model.append(want)
    return _finish(job, builders, model, p["addr_bits"]), phases


def gemm_job(arch: ArchSpec, a: np.ndarray, b: np.ndarray, *,
             algo: str = "mesh") -> tuple[MeshJob, list[Phase]]:
    """Distributed GEMM of int8 ``a[M, K] @ b[K, N]`` on the largest square grid of the mesh:
    ``algo`` = ``mesh`` (MeshGEMM: Cannon on the interleaved ring), ``cannon`` or ``summa``
    (row/column multicasts into double-buffered receive blocks). Returns the job (reads: ``C``
    block per logical core, logical row-major order) and the model's phases."""
    p = _check_arch(arch)
    L = p["lanes"]
    grid = healthy_grid(arch.mesh, square=True)
    P = grid.pr
    m, k = a.shape
    n = b.shape[1]
    mt, kt, nt = -(-m // P), -(-k // P), -(-n // P)
    kw = _kw(kt, L, f"gemm k={k} on a {P}x{P} grid")
    phases = gemm_phases(algo, grid, mt, kt, nt, elem_bytes=1,
                         link_bytes=arch.mesh.link_bytes_per_cycle)
    steps = gemm_steps(algo, P)
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
    for si, (st, ph) in enumerate(zip(steps, phases)):
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
            model.append(_flows_set(ph.flows, rep))
    return _finish(job, builders, model, p["addr_bits"]), phases


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
