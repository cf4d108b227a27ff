"""Collectives: NCCL-like algorithms at two levels of detail.

**Event level** (SimPy processes over a :class:`~.network.Network`): every message is simulated
on the shared links, so collectives that share links contend message by message. **Flow level**
(:class:`FlowTimer`): a collective is its algorithm's closed form below, with bandwidth and
latency taken from the link loads of all concurrent groups' flows (:class:`~.network.FlowLoad`)
— a few arithmetic steps per group instead of ~n² messages, so a step's cost grows about
linearly in chips. Both levels take the same arguments and agree exactly when no link is
shared; on contended cases the flow level is checked against the event level
(``tests/test_cluster_network.py`` states the bound).

Every function takes the network, a group (chip ids, in ring order) and ``nbytes`` — the size of
the buffer each rank holds (all-reduce, reduce-scatter input, all-gather *output*, all-to-all
send buffer; the ``size`` of nccl-tests) — and returns a SimPy event that fires when the last
rank is done. Ranks proceed on their own data dependencies (no global barrier). ``chunks`` = C
pipelines each step's message in C pieces (NCCL's chunking). Closed forms, per-message
bandwidth ``B`` and latency ``α`` (:meth:`Topology.uncontended_seconds`), no shared links:

====================  ==================================  ==========================================
collective            algorithm                           time
====================  ==================================  ==========================================
all_reduce            ``ring``, K = 2(n−1) steps          ring(K, c = S/n)  [r]_
reduce_scatter        ring, K = n−1                       ring(K, c = S/n)
all_gather            ring, K = n−1                       ring(K, c = S/n)
all_reduce            ``tree``: T binary trees (T = 1     (2d + C − 1)·S/(T·C·B) + 2d·α,
                      or 2, NCCL's double binary tree),   d = ⌊log2 n⌋  [t]_
                      each reduces S/T up and broadcasts
                      it down, C chunks pipelined
all_to_all            ``pairwise`` (round r: i → i+r)     (n−1)·(S/(n·B) + α)
all_to_all            ``direct`` (all messages at once)   contention decides
send                  point to point                      S/B + α
====================  ==================================  ==========================================

Rings run on NCCL-like channels (:func:`ring_channels`): a group with ``m > 1`` chips in each
of several nodes runs ``m`` rings of ``S/m`` at once, each crossing between nodes on a different
rail, so ``c = S/(m·n)`` per ring and the node's NICs share the inter-node traffic.

.. [r] ``ring(K, c) = α + max(K·c/B, (K + C − 1)·c/(C·B) + (K − 1)·α)`` — the longest path of
   the max-plus recursion "piece j of step k leaves once piece j of step k−1 has arrived and the
   link has sent piece j−1": the link never idles (bandwidth bound) or the first piece's latency
   chain dominates. C = 1 gives K·(c/B + α).
.. [t] when a parent's links from and to its children do not overlap (e.g. fully connected);
   C = 1 runs the reduce and the broadcast one after the other. Tree 2 is the heap over the
   reversed group, so the leaves of one tree are the inner nodes of the other.

Bus bandwidth follows nccl-tests (``doc/PERFORMANCE.md``): ``algbw = S/t``; ``busbw = algbw ·
2(n−1)/n`` (all-reduce), ``· (n−1)/n`` (reduce-scatter, all-gather, all-to-all), ``· 1`` (send).
"""

from __future__ import annotations

import math
from typing import Callable, Sequence

import simpy

from .network import FlowLoad, Network, events_scheduled
from .topology import Topology

__all__ = ["all_reduce", "reduce_scatter", "all_gather", "all_to_all", "send",
           "COLLECTIVES", "ALGORITHMS", "CollectiveTimer", "FlowTimer", "ring_seconds",
           "tree_seconds", "tree_depth", "bus_bandwidth", "BUS_FACTOR", "ring_channels"]

ALGORITHMS = {"all_reduce": ("ring", "tree"), "reduce_scatter": ("ring",),
              "all_gather": ("ring",), "all_to_all": ("pairwise", "direct"), "send": ("p2p",)}

BUS_FACTOR: dict[str, Callable[[int], float]] = {
    "all_reduce": lambda n: 2 * (n - 1) / n, "reduce_scatter": lambda n: (n - 1) / n,
    "all_gather": lambda n: (n - 1) / n, "all_to_all": lambda n: (n - 1) / n,
    "send": lambda n: 1.0}
"""busbw / algbw of nccl-tests (doc/PERFORMANCE.md in github.com/NVIDIA/nccl-tests)."""


# ---- closed forms ------------------------------------------------------------------------------
def ring_seconds(steps: int, chunk_bytes: float, bandwidth: float, alpha: float,
                 chunks: int = 1) -> float:
    """Seconds of ``steps`` ring steps of ``chunk_bytes`` each (bytes/s, s), every step's message
    pipelined in ``chunks`` pieces: ``α + max(K·c/B, (K + C − 1)·c/(C·B) + (K − 1)·α)``."""
    if steps <= 0 or chunk_bytes <= 0:
        return 0.0
    K, c, C = steps, chunk_bytes, chunks
    return alpha + max(K * c / bandwidth, (K + C - 1) * c / (C * bandwidth) + (K - 1) * alpha)


def tree_depth(n: int) -> int:
    """Depth of the binary heap of ``n`` ranks (edges from the root to the deepest leaf)."""
    return int(math.floor(math.log2(n))) if n > 1 else 0


def tree_seconds(n: int, nbytes: float, bandwidth: float, alpha: float, chunks: int = 1,
                 trees: int = 1) -> float:
    """Tree all-reduce without shared links: ``(2d + C − 1)·S/(T·C·B) + 2d·α``."""
    d = tree_depth(n)
    if d == 0 or nbytes <= 0:
        return 0.0
    return (2 * d + chunks - 1) * nbytes / (trees * chunks * bandwidth) + 2 * d * alpha


def bus_bandwidth(kind: str, n: int, nbytes: float, seconds: float) -> tuple[float, float]:
    """(algbw, busbw) in bytes/s of a collective of ``nbytes`` over ``n`` ranks taking
    ``seconds`` (nccl-tests conventions)."""
    alg = nbytes / seconds
    return alg, alg * BUS_FACTOR[kind](n)


def ring_channels(topology: Topology, group: Sequence[int]) -> list[list[int]]:
    """NCCL's rings (channels) over ``group``: one ring when the group sits in one node or has
    one chip per node; else, with ``m`` chips of the group in every node, ``m`` rings that
    each cross from node to node on a different chip's rail (ring c leaves a node from its
    c-th chip), each carrying 1/m of the buffer — so all the node's NICs work, as NCCL's
    channels do. Uneven groups get one ring."""
    cpn = topology.spec.chips_per_node
    by_node: dict[int, list[int]] = {}
    for x in group:
        by_node.setdefault(x // cpn, []).append(x)
    sizes = {len(v) for v in by_node.values()}
    if len(by_node) == 1 or len(sizes) != 1 or sizes == {1}:
        return [list(group)]
    m = sizes.pop()
    return [[x for local in by_node.values() for x in local[(c + 1) % m:] + local[:(c + 1) % m]]
            for c in range(m)]


# ---- event level -------------------------------------------------------------------------------
def _rings(net: Network, group: Sequence[int], nbytes: float, steps: int, pieces: int = 1):
    """The ring algorithm on every channel of ``group`` (:func:`ring_channels`) at once."""
    chans = ring_channels(net.topology, group)
    n = len(group)
    if len(chans) == 1:
        return _ring(net, group, nbytes / n, steps, pieces)
    return net.env.all_of([_ring(net, g, nbytes / (len(chans) * n), steps, pieces)
                           for g in chans])


def _ring(net: Network, group: Sequence[int], chunk: float, steps: int, pieces: int = 1):
    env, n = net.env, len(group)
    if pieces > 1:
        return _ring_pipelined(net, group, chunk / pieces, steps, pieces)
    arrived = [[env.event() for _ in range(n)] for _ in range(steps)]

    def rank(i: int):
        nxt = (i + 1) % n
        for k in range(steps):
            if k:
                yield arrived[k - 1][i]
            yield from net.transmit(group[i], group[nxt], chunk)
            arrived[k][nxt].succeed()

    return env.all_of([env.process(rank(i)) for i in range(n)])


def _ring_pipelined(net: Network, group: Sequence[int], piece: float, steps: int, C: int):
    """Ring with each step's message in ``C`` pieces: piece j of step k is handed to the link as
    soon as piece j of step k−1 has arrived (sends do not wait for the latency)."""
    env, n = net.env, len(group)
    arrived = {}

    def ev(k, j, i):
        key = (k, j, i)
        e = arrived.get(key)
        if e is None:
            e = arrived[key] = env.event()
        return e

    last = []

    def rank(i: int):
        nxt = (i + 1) % n
        for k in range(steps):
            for j in range(C):
                if k:
                    yield ev(k - 1, j, i)
                s = net.send(group[i], group[nxt], piece)
                s.callbacks.append(lambda _e, k=k, j=j: ev(k, j, nxt).succeed())
                if k == steps - 1:
                    last.append(s)
        yield env.all_of(last[-C:])

    return env.all_of([env.process(rank(i)) for i in range(n)])


def _done(env: simpy.Environment) -> simpy.Event:
    ev = env.event()
    ev.succeed()
    return ev


def all_reduce(net: Network, group: Sequence[int], nbytes: float, algo: str = "ring",
               chunks: int = 1, trees: int = 1) -> simpy.Event:
    """All-reduce ``nbytes`` per rank over ``group`` (``trees``: tree algorithm only)."""
    n = len(group)
    if algo not in ALGORITHMS["all_reduce"]:
        raise ValueError(f"all_reduce algo {algo!r}: accepted are {ALGORITHMS['all_reduce']}")
    if n == 1:
        return _done(net.env)
    if algo == "ring":
        return _rings(net, group, nbytes, 2 * (n - 1), chunks)
    orders = [list(group), list(group)[::-1]][:trees]
    env = net.env
    return env.all_of([env.process(_tree(net, g, nbytes / trees, chunks)) for g in orders])


def _tree(net: Network, group: Sequence[int], nbytes: float, C: int = 1):
    """Binary-heap tree, ``C`` chunks pipelined: a rank sends chunk j to its parent once both
    children's chunk j arrived; the root's reduced chunk j goes back down at once, each rank
    forwarding it to its children. C = 1: the whole buffer up, then down."""
    env, n = net.env, len(group)
    piece = nbytes / C
    up = [[env.event() for _ in range(n)] for _ in range(C)]    # chunk j reached i's parent
    down = [[env.event() for _ in range(n)] for _ in range(C)]  # chunk j's result reached i
    sends = []

    def kids(i):
        return [c for c in (2 * i + 1, 2 * i + 2) if c < n]

    def reduce_up(i: int):
        for j in range(C):
            if kids(i):
                yield env.all_of([up[j][c] for c in kids(i)])
            if i:
                s = net.send(group[i], group[(i - 1) // 2], piece)
                s.callbacks.append(lambda _e, j=j: up[j][i].succeed())
            else:
                down[j][0].succeed()

    def bcast_down(i: int):
        for j in range(C):
            yield down[j][i]
            for c in kids(i):
                s = net.send(group[i], group[c], piece)
                s.callbacks.append(lambda _e, j=j, c=c: down[j][c].succeed())
                sends.append(s)

    procs = [env.process(reduce_up(i)) for i in range(n)]
    procs += [env.process(bcast_down(i)) for i in range(n)]
    yield env.all_of(procs)
    yield env.all_of([down[C - 1][i] for i in range(n)])


def reduce_scatter(net: Network, group: Sequence[int], nbytes: float, algo: str = "ring",
                   chunks: int = 1):
    """Ring reduce-scatter of an ``nbytes`` buffer per rank (each rank keeps nbytes/n)."""
    n = len(group)
    return _done(net.env) if n == 1 else _rings(net, group, nbytes, n - 1, chunks)


def all_gather(net: Network, group: Sequence[int], nbytes: float, algo: str = "ring",
               chunks: int = 1):
    """Ring all-gather into an ``nbytes`` buffer per rank (each rank contributes nbytes/n)."""
    n = len(group)
    return _done(net.env) if n == 1 else _rings(net, group, nbytes, n - 1, chunks)


def all_to_all(net: Network, group: Sequence[int], nbytes: float, algo: str = "pairwise",
               chunks: int = 1):
    """All-to-all: each rank sends nbytes/n to every other rank (``chunks`` is not used)."""
    env, n = net.env, len(group)
    if algo not in ALGORITHMS["all_to_all"]:
        raise ValueError(f"all_to_all algo {algo!r}: accepted are {ALGORITHMS['all_to_all']}")
    if n == 1:
        return _done(env)
    chunk = nbytes / n
    if algo == "direct":
        return env.all_of([net.send(group[i], group[j], chunk)
                           for i in range(n) for j in range(n) if i != j])
    got = [[env.event() for _ in range(n)] for _ in range(n)]   # got[r][i]: round r arrived at i

    def rank(i: int):
        for r in range(1, n):
            j = (i + r) % n
            yield net.send(group[i], group[j], chunk)
            got[r][j].succeed()
            yield got[r][i]

    return env.all_of([env.process(rank(i)) for i in range(n)])


def send(net: Network, group: Sequence[int], nbytes: float, algo: str = "p2p", chunks: int = 1):
    """Point-to-point: ``group = (src, dst)``."""
    return net.send(group[0], group[1], nbytes)


COLLECTIVES: dict[str, Callable] = {"all_reduce": all_reduce, "reduce_scatter": reduce_scatter,
                                    "all_gather": all_gather, "all_to_all": all_to_all,
                                    "send": send}


def _check(kind: str, algo: str | None) -> str:
    if kind not in COLLECTIVES:
        raise ValueError(f"collective {kind!r}: accepted are {sorted(COLLECTIVES)}")
    algo = algo or ALGORITHMS[kind][0]
    if algo not in ALGORITHMS[kind]:
        raise ValueError(f"{kind} algo {algo!r}: accepted are {ALGORITHMS[kind]}")
    return algo


def _heap_edges(order: Sequence[int]) -> tuple[list[tuple[int, int]], list[tuple[int, int]]]:
    """(child→parent, parent→child) edges of the binary heap over ``order``."""
    upe = [(order[i], order[(i - 1) // 2]) for i in range(1, len(order))]
    return upe, [(b, a) for a, b in upe]


# ---- flow level --------------------------------------------------------------------------------
class FlowTimer:
    """Seconds of a *phase* (the same collective run at once by every group in ``groups``) at
    flow level: the algorithm's closed form (module table) with ``B = 1/β`` and ``α`` of the
    :class:`~.network.FlowLoad` of the flows that run at the same time in one step (ring: every
    rank to its successor on every channel, in all groups; tree: all child↔parent edges of all
    trees when pipelined, one tree level and direction at a time when C = 1; pairwise
    all-to-all: each round's flows). No SimPy; memoized on (collective, algorithm, groups).
    Same interface as :class:`CollectiveTimer`."""

    def __init__(self, topology: Topology, chunks: int = 1, trees: int = 1) -> None:
        self.topology = topology
        self.chunks, self.trees = chunks, trees
        self._loads: dict[tuple, list[FlowLoad]] = {}
        self.events = 0     # no SimPy events: kept for the CollectiveTimer interface
        self.runs = 0       # flow-load analyses made

    def _phase(self, kind: str, algo: str, groups: tuple) -> list[FlowLoad]:
        key = (kind, algo, groups)
        fl = self._loads.get(key)
        if fl is not None:
            return fl
        topo = self.topology
        if kind == "all_to_all" and algo == "pairwise":
            n = max(len(g) for g in groups)
            fl = [FlowLoad(topo, [(g[i], g[(i + r) % len(g)]) for g in groups
                                  for i in range(len(g)) if r < len(g)]) for r in range(1, n)]
        elif kind == "all_to_all":
            fl = [FlowLoad(topo, [(a, b) for g in groups for a in g for b in g if a != b])]
        elif kind == "all_reduce" and algo == "tree":
            levels: dict[int, list[tuple[int, int]]] = {}     # child depth -> up edges
            for g in groups:
                for order in [list(g), list(g)[::-1]][:self.trees]:
                    for i, e in enumerate(_heap_edges(order)[0], start=1):
                        levels.setdefault(tree_depth(i + 1), []).append(e)
            if self.chunks == 1:     # one level at a time: up d..1, then down 1..d
                fl = [FlowLoad(topo, levels[k]) for k in sorted(levels, reverse=True)]
                fl += [FlowLoad(topo, [(b, a) for a, b in levels[k]]) for k in sorted(levels)]
            else:                    # pipelined: every edge, both directions, at once
                every = [e for k in levels for e in levels[k]]
                fl = [FlowLoad(topo, every + [(b, a) for a, b in every])]
        elif kind == "send":
            fl = [FlowLoad(topo, [(g[0], g[1]) for g in groups])]
        else:   # rings: every channel of every group at once
            fl = [FlowLoad(topo, [(c[i], c[(i + 1) % len(c)]) for g in groups
                                  for c in ring_channels(topo, g) for i in range(len(c))])]
        self._loads[key] = fl
        self.runs += 1
        return fl

    def seconds(self, kind: str, groups: Sequence[Sequence[int]], nbytes: float,
                algo: str | None = None) -> float:
        algo = _check(kind, algo)
        groups = tuple(tuple(g) for g in groups if len(g) > 1)
        if not groups or nbytes <= 0:
            return 0.0
        fl = self._phase(kind, algo, groups)
        n = max(len(g) for g in groups)
        C = self.chunks
        if kind == "send":
            return fl[0].seconds(nbytes)
        if kind == "all_to_all":
            return sum(f.seconds(nbytes / n) for f in fl)
        if kind == "all_reduce" and algo == "tree":
            d, s = tree_depth(n), nbytes / (self.trees * C)
            if C == 1:
                return sum(f.seconds(s) for f in fl)
            return (2 * d + C - 1) * s * fl[0].beta + 2 * d * fl[0].alpha
        steps = 2 * (n - 1) if kind == "all_reduce" else n - 1
        f, m = fl[0], len(ring_channels(self.topology, groups[0]))
        return ring_seconds(steps, nbytes / (m * n), 1.0 / f.beta, f.alpha, C)

    def traffic(self, kind: str, groups: Sequence[Sequence[int]], algo: str | None = None,
                probe_bytes: float = 2**20) -> dict[int, float]:
        """Bytes each link carries per byte of ``nbytes`` (link id -> bytes/byte), exact: the
        algorithm's flows times the bytes each flow carries over the whole collective."""
        algo = _check(kind, algo)
        groups = tuple(tuple(g) for g in groups if len(g) > 1)
        if not groups:
            return {}
        fl = self._phase(kind, algo, groups)
        n = max(len(g) for g in groups)
        m = len(ring_channels(self.topology, groups[0])) if algo == "ring" else 1
        per_flow = {"all_reduce": 2 * (n - 1) / n, "reduce_scatter": (n - 1) / n,
                    "all_gather": (n - 1) / n, "all_to_all": 1 / n, "send": 1.0}[kind]
        if kind == "all_reduce" and algo == "tree":
            per_flow = 1.0 / self.trees
        per_flow /= m
        out: dict[int, float] = {}
        for f in fl:
            for link, load in f.load.items():
                out[link] = out.get(link, 0.0) + load * per_flow
        return out

    def affine(self, kind: str, groups: Sequence[Sequence[int]], algo: str | None = None,
               probe_bytes: float = 2**20) -> tuple[float, float] | None:
        """(a, b) with ``seconds(S) = a + b·S`` when the closed form is affine in S (C = 1)."""
        if self.chunks != 1:
            return None
        t1 = self.seconds(kind, groups, probe_bytes, algo)
        t2 = self.seconds(kind, groups, 2 * probe_bytes, algo)
        b = (t2 - t1) / probe_bytes
        return t1 - b * probe_bytes, b


class CollectiveTimer:
    """Seconds for a *phase*: the same collective run at once by every group in ``groups`` (as
    SPMD ranks do), simulated in a fresh SimPy environment on the real topology so the groups
    contend for shared links. Memoized on (collective, algorithm, groups, bytes)."""

    def __init__(self, topology: Topology, chunks: int = 1, trees: int = 1) -> None:
        self.topology = topology
        self.chunks, self.trees = chunks, trees
        self._cache: dict[tuple, float] = {}
        self._waits: dict[tuple, int] = {}
        self._lines: dict[tuple, tuple[float, float] | None] = {}
        self._carried: dict[tuple, dict[int, float]] = {}
        self.events = 0     # SimPy events scheduled by all phase simulations
        self.runs = 0

    def seconds(self, kind: str, groups: Sequence[Sequence[int]], nbytes: float,
                algo: str | None = None) -> float:
        algo = _check(kind, algo)
        groups = tuple(tuple(g) for g in groups if len(g) > 1)
        if not groups or nbytes <= 0:
            return 0.0
        key = (kind, algo, groups, float(nbytes))
        t = self._cache.get(key)
        if t is None:
            env = simpy.Environment()
            net = Network(env, self.topology)
            fn = COLLECTIVES[kind]
            kw = {"trees": self.trees} if kind == "all_reduce" else {}
            env.all_of([fn(net, g, nbytes, algo, self.chunks, **kw) for g in groups])
            env.run()
            t = self._cache[key] = env.now
            self._waits[key] = net.waits
            self._carried[key] = net.link_bytes
            self.events += events_scheduled(env)
            self.runs += 1
        return t

    def traffic(self, kind: str, groups: Sequence[Sequence[int]], algo: str | None = None,
                probe_bytes: float = 2**20) -> dict[int, float]:
        """Bytes each link carries per byte of ``nbytes`` when every group of ``groups`` runs the
        collective once (link id -> bytes/byte; for the energy model). Every algorithm here
        splits the buffer into messages proportional to ``nbytes``, so one probe run gives the
        traffic at any size exactly."""
        algo = algo or ALGORITHMS[kind][0]
        if not any(len(g) > 1 for g in groups):
            return {}
        self.seconds(kind, groups, probe_bytes, algo)
        key = (kind, algo, tuple(tuple(g) for g in groups if len(g) > 1), float(probe_bytes))
        return {link: b / probe_bytes for link, b in self._carried[key].items()}

    def affine(self, kind: str, groups: Sequence[Sequence[int]], algo: str | None = None,
               probe_bytes: float = 2**20) -> tuple[float, float] | None:
        """(a, b) with ``seconds(S) = a + b·S`` for every S, when the phase is contention-free
        (no link request queued at two probe sizes): every message then takes its own
        ``S_i/B + α`` and ``S_i`` is proportional to S, so the makespan is exactly affine in S.
        None when contention was seen (then call :meth:`seconds` per size)."""
        algo = algo or ALGORITHMS[kind][0]
        gkey = (kind, algo, tuple(tuple(g) for g in groups if len(g) > 1))
        if gkey not in self._lines:
            t1 = self.seconds(kind, groups, probe_bytes, algo)
            t2 = self.seconds(kind, groups, 2 * probe_bytes, algo)
            w = sum(self._waits.get((*gkey, float(s)), 0) for s in (probe_bytes, 2 * probe_bytes))
            b = (t2 - t1) / probe_bytes
            self._lines[gkey] = None if w else (t1 - b * probe_bytes, b)
        return self._lines[gkey]

