"""Collectives as SimPy processes over a :class:`~.network.Network`.

Every function takes the network, a group (chip ids, in ring order) and ``nbytes`` — the size of
the buffer each rank holds (all-reduce, reduce-scatter input, all-gather *output*, all-to-all
send buffer) — and returns a SimPy process that ends when the last rank is done. Ranks proceed
on their own data dependencies (no global barrier), so contention delays exactly the ranks it
hits. Closed forms for a group whose messages never share a link, with per-message bandwidth
``B`` and latency ``α`` (:meth:`Topology.uncontended_seconds`):

====================  ==================================  =========================
collective            algorithm                           uncontended time
====================  ==================================  =========================
all_reduce            ``ring``                            2(n−1)·(S/(n·B) + α)
all_reduce            ``tree`` (binary, not pipelined)    2·⌊log2 n⌋·(S/B + α) [1]_
reduce_scatter        ring                                (n−1)·(S/(n·B) + α)
all_gather            ring                                (n−1)·(S/(n·B) + α)
all_to_all            ``pairwise`` (round r: i → i+r)     (n−1)·(S/(n·B) + α)
all_to_all            ``direct`` (all messages at once)   contention decides
send                  point to point                      S/B + α
====================  ==================================  =========================

.. [1] when a parent's links from its two children do not overlap (e.g. fully connected).
"""

from __future__ import annotations

from typing import Callable, Sequence

import simpy

from .network import Network, events_scheduled
from .topology import Topology

__all__ = ["all_reduce", "reduce_scatter", "all_gather", "all_to_all", "send",
           "COLLECTIVES", "ALGORITHMS", "CollectiveTimer"]

ALGORITHMS = {"all_reduce": ("ring", "tree"), "reduce_scatter": ("ring",),
              "all_gather": ("ring",), "all_to_all": ("pairwise", "direct"), "send": ("p2p",)}


def _ring(net: Network, group: Sequence[int], chunk: float, steps: int):
    env, n = net.env, len(group)
    arrived = [[env.event() for _ in range(n)] for _ in range(steps)]

    def rank(i: int):
        nxt = (i + 1) % n
        for k in range(steps):
            if k:
                yield arrived[k - 1][i]
            yield from net.transmit(group[i], group[nxt], chunk)
            arrived[k][nxt].succeed()

    return env.all_of([env.process(rank(i)) for i in range(n)])


def _done(env: simpy.Environment) -> simpy.Event:
    ev = env.event()
    ev.succeed()
    return ev


def all_reduce(net: Network, group: Sequence[int], nbytes: float, algo: str = "ring") -> simpy.Event:
    """All-reduce ``nbytes`` per rank over ``group``."""
    n = len(group)
    if n == 1:
        return _done(net.env)
    if algo == "ring":
        return _ring(net, group, nbytes / n, 2 * (n - 1))
    if algo == "tree":
        return net.env.process(_tree(net, group, nbytes))
    raise ValueError(f"all_reduce algo {algo!r}: accepted are {ALGORITHMS['all_reduce']}")


def _tree(net: Network, group: Sequence[int], nbytes: float):
    """Binary-heap tree: reduce to rank 0 (each rank sends once both children arrived), then
    broadcast back down; whole buffers, not pipelined."""
    env, n = net.env, len(group)
    up = [env.event() for _ in range(n)]      # rank i's partial sum has reached its parent
    down = [env.event() for _ in range(n)]    # the result has reached rank i

    def rank(i: int):
        kids = [c for c in (2 * i + 1, 2 * i + 2) if c < n]
        if kids:
            yield env.all_of([up[c] for c in kids])
        if i:
            yield net.send(group[i], group[(i - 1) // 2], nbytes)
            up[i].succeed()
            yield down[i]
        else:
            down[0].succeed()
        sends = [net.send(group[i], group[c], nbytes) for c in kids]
        for c, ev in zip(kids, sends):
            ev.callbacks.append(lambda _e, c=c: down[c].succeed())
        if sends:
            yield env.all_of(sends)

    yield env.all_of([env.process(rank(i)) for i in range(n)])


def reduce_scatter(net: Network, group: Sequence[int], nbytes: float, algo: str = "ring"):
    """Ring reduce-scatter of an ``nbytes`` buffer per rank (each rank keeps nbytes/n)."""
    n = len(group)
    return _done(net.env) if n == 1 else _ring(net, group, nbytes / n, n - 1)


def all_gather(net: Network, group: Sequence[int], nbytes: float, algo: str = "ring"):
    """Ring all-gather into an ``nbytes`` buffer per rank (each rank contributes nbytes/n)."""
    n = len(group)
    return _done(net.env) if n == 1 else _ring(net, group, nbytes / n, n - 1)


def all_to_all(net: Network, group: Sequence[int], nbytes: float, algo: str = "pairwise"):
    """All-to-all: each rank sends nbytes/n to every other rank."""
    env, n = net.env, len(group)
    if n == 1:
        return _done(env)
    chunk = nbytes / n
    if algo == "direct":
        return env.all_of([net.send(group[i], group[j], chunk)
                           for i in range(n) for j in range(n) if i != j])
    if algo != "pairwise":
        raise ValueError(f"all_to_all algo {algo!r}: accepted are {ALGORITHMS['all_to_all']}")
    got = [[env.event() for _ in range(n)] for _ in range(n)]   # got[r][i]: round r arrived at i

    def rank(i: int):
        for r in range(1, n):
            j = (i + r) % n
            yield net.send(group[i], group[j], chunk)
            got[r][j].succeed()
            yield got[r][i]

    return env.all_of([env.process(rank(i)) for i in range(n)])


def send(net: Network, group: Sequence[int], nbytes: float, algo: str = "p2p"):
    """Point-to-point: ``group = (src, dst)``."""
    return net.send(group[0], group[1], nbytes)


COLLECTIVES: dict[str, Callable] = {"all_reduce": all_reduce, "reduce_scatter": reduce_scatter,
                                    "all_gather": all_gather, "all_to_all": all_to_all,
                                    "send": send}


class CollectiveTimer:
    """Seconds for a *phase*: the same collective run at once by every group in ``groups`` (as
    SPMD ranks do), simulated in a fresh SimPy environment on the real topology so the groups
    contend for shared links. Memoized on (collective, algorithm, groups, bytes)."""

    def __init__(self, topology: Topology) -> None:
        self.topology = topology
        self._cache: dict[tuple, float] = {}
        self._waits: dict[tuple, int] = {}
        self._lines: dict[tuple, tuple[float, float] | None] = {}
        self._carried: dict[tuple, dict[int, float]] = {}
        self.events = 0     # SimPy events scheduled by all phase simulations
        self.runs = 0

    def seconds(self, kind: str, groups: Sequence[Sequence[int]], nbytes: float,
                algo: str | None = None) -> float:
        if kind not in COLLECTIVES:
            raise ValueError(f"collective {kind!r}: accepted are {sorted(COLLECTIVES)}")
        algo = algo or ALGORITHMS[kind][0]
        groups = tuple(tuple(g) for g in groups if len(g) > 1)
        if not groups or nbytes <= 0:
            return 0.0
        key = (kind, algo, groups, float(nbytes))
        t = self._cache.get(key)
        if t is None:
            env = simpy.Environment()
            net = Network(env, self.topology)
            fn = COLLECTIVES[kind]
            env.all_of([fn(net, g, nbytes, algo) for g in groups])
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

