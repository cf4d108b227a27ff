"""The network in SimPy: every link is a first-come first-served lock of capacity 1 (the
semantics of a ``simpy.Resource(capacity=1)``, without its request/release events when the link
is free: :class:`_Link`).

A message of ``S`` bytes from chip ``a`` to chip ``b`` is split over the stripes of its route
(one per network plane). Each stripe acquires **all** links of its path (in a global link order,
so waiting never deadlocks), holds them for ``S_stripe / min(bandwidth on the path)`` seconds
(cut-through: the bits stream across all hops at once), releases them, and arrives after the
path's summed latency. Alone on the network a message therefore takes exactly
``S/B + Σ latency`` (:meth:`Topology.uncontended_seconds`); two messages that share a link are
served first-come first-served, so the second one waits for the first one's serialization time.
"""

from __future__ import annotations

import re
from collections import deque

import simpy

from .topology import Topology

__all__ = ["Network", "events_scheduled"]


def events_scheduled(env: simpy.Environment) -> int:
    """Number of events ``env`` has scheduled so far (SimPy's event-id counter)."""
    m = re.search(r"\d+", repr(getattr(env, "_eid", "")))
    return int(m.group()) if m else 0


class Network:
    """Links of ``topology`` as SimPy resources in ``env``; :meth:`send` moves bytes."""

    def __init__(self, env: simpy.Environment, topology: Topology) -> None:
        self.env = env
        self.topology = topology
        self._links: dict[int, _Link] = {}
        self._paths: dict[tuple[int, ...], tuple[tuple[int, ...], float, float]] = {}
        self.busy_seconds: dict[int, float] = {}   # per link: time spent serializing
        self.link_bytes: dict[int, float] = {}     # per link: bytes carried (energy model)
        self.bytes_sent = 0.0
        self.messages = 0
        self.waits = 0          # link requests that had to queue (contention happened)

    def _res(self, link: int) -> "_Link":
        r = self._links.get(link)
        if r is None:
            r = self._links[link] = _Link()
        return r

    def send(self, src: int, dst: int, nbytes: float) -> simpy.Event:
        """An event that fires when ``nbytes`` sent from chip ``src`` have all arrived at ``dst``.
        A message to oneself, or of zero bytes, arrives at once."""
        if src == dst or nbytes <= 0:
            ev = self.env.event()
            ev.succeed()
            return ev
        self.messages += 1
        self.bytes_sent += nbytes
        stripes = self.topology.route(src, dst)
        if len(stripes) == 1:
            return self.env.process(self._stripe(stripes[0][0], nbytes))
        return self.env.all_of([self.env.process(self._stripe(path, frac * nbytes))
                                for path, frac in stripes])

    def send_many(self, pairs: list[tuple[int, int]], nbytes: float) -> simpy.Event:
        """Send ``nbytes`` for each (src, dst) pair; fires when all have arrived. Pairs whose
        routes are identical share every link, so FIFO serializes them back to back: they are
        sent as one message of the summed size (same completion time, fewer events)."""
        return self.env.all_of([self.send(a, b, s)
                                for a, b, s in self.merged_sends(pairs, nbytes)])

    def transmit(self, src: int, dst: int, nbytes: float):
        """Generator form of :meth:`send` for ``yield from`` inside a process (saves a process
        per message when the route has one stripe); same timing."""
        if src == dst or nbytes <= 0:
            return
        stripes = self.topology.route(src, dst)
        if len(stripes) > 1:
            yield self.send(src, dst, nbytes)
            return
        self.messages += 1
        self.bytes_sent += nbytes
        yield from self._stripe(stripes[0][0], nbytes)

    def path_facts(self, path: tuple[int, ...]) -> tuple[tuple[int, ...], float, float]:
        """(links in lock order, narrowest bandwidth (B/s), summed latency (s)) of a stripe's
        path (memoized)."""
        facts = self._paths.get(path)
        if facts is None:
            topo = self.topology
            facts = self._paths[path] = (
                tuple(sorted(path)), float(min(topo.bandwidth[i] for i in path)),
                float(sum(topo.latency[i] for i in path)))
        return facts

    def merged_sends(self, pairs: list[tuple[int, int]], nbytes: float
                     ) -> list[tuple[int, int, float]]:
        """The messages :meth:`send_many` sends for ``pairs``: (src, dst, bytes), pairs of
        identical routes merged into one message of their summed size."""
        merged: dict[tuple, list] = {}
        for a, b in pairs:
            if a == b or nbytes <= 0:
                continue
            r = self.topology.route(a, b)
            if r in merged:
                merged[r][2] += nbytes
            else:
                merged[r] = [a, b, nbytes]
        return [(a, b, s) for a, b, s in merged.values()]

    def _stripe(self, path: tuple[int, ...], nbytes: float):
        order, bw, lat = self.path_facts(path)
        held = []
        for link in order:
            res = self._res(link)
            if res.busy:                      # queue behind the holder (FIFO)
                self.waits += 1
                ev = self.env.event()
                res.queue.append(ev)
                yield ev                      # ownership is handed over by release()
            else:
                res.busy = True
            held.append(res)
        hold = nbytes / bw
        yield self.env.timeout(hold)
        busy, carried = self.busy_seconds, self.link_bytes
        for res, link in zip(held, order):
            res.release()
            busy[link] = busy.get(link, 0.0) + hold
            carried[link] = carried.get(link, 0.0) + nbytes
        if lat > 0:
            yield self.env.timeout(lat)


class _Link:
    """A link's FIFO lock: ``busy`` while held; waiters' events in arrival order. Release hands
    the link to the first waiter (its event fires at the release time), as SimPy's Resource."""

    __slots__ = ("busy", "queue")

    def __init__(self) -> None:
        self.busy = False
        self.queue: deque[simpy.Event] = deque()

    def release(self) -> None:
        if self.queue:
            self.queue.popleft().succeed()
        else:
            self.busy = False


class FlowLoad:
    """The flow level: a set of point-to-point flows that run *at the same time*, each carrying
    the same ``c`` bytes, on the links of ``topology`` (no SimPy).

    Every link drains the bytes of all flows through it at its bandwidth, so link ``l`` needs
    ``load_l · c / B_l`` seconds, where ``load_l`` is the summed fraction of a flow's bytes it
    carries (a flow striped over 4 planes puts 1/4 on each). A flow ends when the slowest link of
    its route has drained, plus its path latency: ``t_e(c) = c · β_e + α_e`` with
    ``β_e = max over its links of load_l / B_l`` (s/byte) and ``α_e`` its slowest stripe's summed
    latency (s). Alone on the network this is :meth:`Topology.uncontended_seconds`; when flows
    share a link each is slowed by the number sharing it (fair sharing of the bottleneck, an
    upper bound on the finish time of the last flow through it)."""

    def __init__(self, topology: Topology, flows: list[tuple[int, int]]) -> None:
        self.topology = topology
        load: dict[int, float] = {}
        routes = []
        for a, b in flows:
            if a == b:
                continue
            r = topology.route(a, b)
            routes.append(r)
            for path, frac in r:
                for link in path:
                    load[link] = load.get(link, 0.0) + frac
        self.load = load                   # link id -> summed byte fraction (flows through it)
        bw, lat = topology.bandwidth, topology.latency
        beta, alpha = 0.0, 0.0
        for r in routes:
            for path, _ in r:
                beta = max(beta, max(load[x] / bw[x] for x in path))
                alpha = max(alpha, float(sum(lat[x] for x in path)))
        self.beta = float(beta)           # s per byte of c on the slowest flow
        self.alpha = alpha                # s, the slowest path's latency
        self.flows = len(routes)

    def seconds(self, nbytes: float) -> float:
        """Makespan of the flows (``nbytes`` each), bounded as ``nbytes·β + α``."""
        return nbytes * self.beta + self.alpha if self.flows else 0.0
