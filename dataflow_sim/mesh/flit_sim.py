"""Cycle-by-cycle flit model of the arbitrating RTL mesh: every flit's ejection cycle and every
phase's cycles, from the per-tile phase instructions the compiler programs.

The mesh cost model (:mod:`.model`) prices a phase in closed form (worst latency + busiest
link's flits). The RTL routers (:mod:`tilewright.rtl.mesh_router`) arbitrate at run time, and
under contention the order they choose decides when each flit arrives; this module runs the
same rule, so it predicts the RTL mesh flit for flit:

* each router has six inputs (n, e, s, w, injection lanes 0 and 1, in round-robin order) with a
  ``depth``-flit FIFO that a flit can bypass when empty, and six outputs (n, e, s, w, ejection
  lanes 0 and 1); a head flit asks for the outputs its colour's route entry names that have not
  served it yet;
* every output grants one asking input per cycle, round-robin from the input after the last one
  it granted (pointer 0 at each phase start), when it is ready: a mesh output holds a credit
  (``depth`` at phase start, one spent per flit, one back one cycle after the neighbour pops
  that input), an ejection lane is always ready unless it is a chain stage (then it holds
  credits for injection lane k's FIFO);
* a granted flit appears on the output ``hop_cycles`` (mesh side) or ``eject_cycles`` (ejection)
  cycles later; a head flit is popped once all its outputs have served it;
* a tile offers its lane's next SRAM word while the injection FIFO has room, writes every flit
  its ejection lanes deliver (a chain lane re-injects it on injection lane k in that cycle), and
  runs its ``mt * nt * kw``-cycle MAC block from the phase's first cycle; a phase ends in the
  first cycle in which every tile has finished (the RTL's barrier).

Cycles are counted like the RTL's ``cycles`` counter: 0 in the first cycle of the first phase.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass

from tilewright.compiler.mesh_isa import (INPUTS, N_LANES, OPPOSITE, OUTPUTS, SIDES, STEP,
                                          mesh_params)

__all__ = ["FlitRun", "simulate_fields", "simulate_job"]

_NI, _NO = len(INPUTS), len(OUTPUTS)


@dataclass
class FlitRun:
    """What the flit model predicts for a job: ``cycles`` (all phases), ``phase_cycles`` and
    ``arrivals``: sorted (cycle, tile index, ejection lane) of every flit a router delivers."""

    cycles: int
    phase_cycles: list[int]
    arrivals: list[tuple[int, int, int]]


class _Router:
    def __init__(self, f: dict, hop: int, eject: int, depth: int):
        self.table = {int(k[6:]): v for k, v in f.items() if k.startswith("route_")}
        self.chain = [bool(f.get(f"chain{k}", 0)) for k in range(N_LANES)]
        self.fifo = [deque() for _ in range(_NI)]
        self.done = [0] * _NI
        self.ptr = [0] * _NO
        self.cred = [depth] * _NO
        self.pipe = [[None] * (hop if o < 4 else eject) for o in range(_NO)]
        self.credit_reg = [False] * 4      # credit returned for input side d (registered)
        self.depth = depth

    def out(self, o: int):
        return self.pipe[o][-1]


def simulate_fields(fields: list[dict], rows: int, cols: int, *, hop: int, eject: int,
                    depth: int, t0: int = 0, max_cycles: int = 1_000_000):
    """One phase: ``fields`` per tile (tile index ``r * cols + c``, names of
    :func:`~tilewright.compiler.mesh_isa.instr_fields`). Returns (cycles, arrivals) with arrival
    cycles offset by ``t0``; RuntimeError if the phase has not ended after ``max_cycles``."""
    n = rows * cols
    rt = [_Router(fields[t], hop, eject, depth) for t in range(n)]
    inj_cnt = [[0] * N_LANES for _ in range(n)]
    ej_cnt = [[0] * N_LANES for _ in range(n)]
    g = lambda t, name: int(fields[t].get(name, 0))          # noqa: E731
    mac = [g(t, "mac_mt") * g(t, "mac_nt") * g(t, "mac_kw") for t in range(n)]
    nbr = {}
    for t in range(n):
        r, c = divmod(t, cols)
        for d, (dr, dc) in STEP.items():
            if 0 <= r + dr < rows and 0 <= c + dc < cols:
                nbr[(t, d)] = (r + dr) * cols + c + dc
    arrivals = []
    for cyc in range(max_cycles):
        # ---- combinational: what every router sees this cycle
        incoming = []            # per tile, per input: flit or None
        fire = [[False] * N_LANES for _ in range(n)]
        for t in range(n):
            R = rt[t]
            inc = [None] * _NI
            for i, d in enumerate(SIDES):
                nb = nbr.get((t, d))
                if nb is not None:
                    inc[i] = rt[nb].out(OUTPUTS.index(OPPOSITE[d]))
            for k in range(N_LANES):
                ej = R.out(4 + k)
                if ej is not None:
                    arrivals.append((t0 + cyc, t, k))
                    fire[t][k] = ej_cnt[t][k] < g(t, f"ej{k}_count")
                if R.chain[k]:
                    if fire[t][k]:
                        inc[4 + k] = (g(t, f"inj{k}_color"), ej[1])
                elif inj_cnt[t][k] < g(t, f"inj{k}_count") and len(R.fifo[4 + k]) < depth:
                    inc[4 + k] = (g(t, f"inj{k}_color"), (t, k, inj_cnt[t][k]))
            incoming.append(inc)
        finishing = True
        for t in range(n):
            for k in range(N_LANES):
                tot = g(t, f"inj{k}_count")
                go = incoming[t][4 + k] is not None and not rt[t].chain[k]
                finishing &= inj_cnt[t][k] >= tot or (go and inj_cnt[t][k] + 1 == tot)
                tot = g(t, f"ej{k}_count")
                finishing &= ej_cnt[t][k] >= tot or (fire[t][k] and ej_cnt[t][k] + 1 == tot)
            finishing &= mac[t] == 0 or cyc >= mac[t] - 1
        # ---- arbitration
        new_state = []
        for t in range(n):
            R, inc = rt[t], incoming[t]
            heads = [R.fifo[i][0] if R.fifo[i] else inc[i] for i in range(_NI)]
            req = [(R.table.get(h[0], 0) & ~R.done[i]) if h is not None else 0
                   for i, h in enumerate(heads)]
            grant = [None] * _NO
            for o in range(_NO):
                ready = R.cred[o] > 0 if (o < 4 or R.chain[o - 4]) else True
                if not ready:
                    continue
                for j in range(_NI):
                    i = (R.ptr[o] + j) % _NI
                    if req[i] >> o & 1:
                        grant[o] = i
                        break
            served = [sum(1 << o for o in range(_NO) if grant[o] == i) for i in range(_NI)]
            pop = [heads[i] is not None and (req[i] & ~served[i]) == 0 for i in range(_NI)]
            new_state.append((heads, grant, served, pop))
        # ---- clock edge
        for t in range(n):
            R, inc = rt[t], incoming[t]
            heads, grant, served, pop = new_state[t]
            for o in range(_NO):
                flit = heads[grant[o]] if grant[o] is not None else None
                R.pipe[o] = [flit] + R.pipe[o][:-1]
                if grant[o] is not None:
                    R.ptr[o] = (grant[o] + 1) % _NI
                if o < 4:
                    nb = nbr.get((t, SIDES[o]))
                    back = nb is not None and rt[nb].credit_reg[SIDES.index(OPPOSITE[SIDES[o]])]
                    R.cred[o] += int(back) - int(grant[o] is not None)
                elif R.chain[o - 4]:
                    R.cred[o] += int(pop[o]) - int(grant[o] is not None)
            for i in range(_NI):
                q = R.fifo[i]
                if q:
                    if pop[i]:
                        q.popleft()
                    if inc[i] is not None:
                        q.append(inc[i])
                elif inc[i] is not None and not pop[i]:
                    q.append(inc[i])
                if len(q) > depth:
                    raise AssertionError(f"tile {t} input {INPUTS[i]}: FIFO overflow")
                R.done[i] = 0 if pop[i] else R.done[i] | served[i]
        for t in range(n):       # registered credit returns (after every router read them)
            rt[t].credit_reg = [new_state[t][3][i] for i in range(4)]
            for k in range(N_LANES):
                if incoming[t][4 + k] is not None and not rt[t].chain[k]:
                    inj_cnt[t][k] += 1
                if fire[t][k]:
                    ej_cnt[t][k] += 1
        if finishing:
            return cyc + 1, arrivals
    raise RuntimeError(f"mesh phase did not finish in {max_cycles} cycles (a flit routed "
                       "nowhere, or a deadlock)")


def simulate_job(job, arch) -> FlitRun:
    """Every phase of a :class:`~tilewright.compiler.mesh_codegen.MeshJob` (its ``fields``) on
    the RTL mesh of ``arch`` (latencies and buffer depth: :func:`mesh_params`)."""
    p = mesh_params(arch)
    hop, eject, depth = p["hop_cycles"], p["eject_cycles"], p["depth"]
    t0, per, arr = 0, [], []
    for fields in job.fields:
        cyc, a = simulate_fields(fields, job.rows, job.cols, hop=hop, eject=eject, depth=depth,
                                 t0=t0)
        per.append(cyc)
        arr += a
        t0 += cyc
    return FlitRun(t0, per, sorted(arr))
