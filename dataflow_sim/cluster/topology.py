"""Topology: the links of a cluster and the route a message takes between two chips.

Every link is one direction of one wire: bandwidth in bytes/s, latency in s. Links are shared
resources in the network model (:mod:`.network`); the route of a message is fixed (deterministic
routing), so contention arises where routes overlap.

Routing rules:

* ``switch`` (intra): chip → switch (its up-link) → chip (the destination's down-link).
* ``ring`` / ``torus``: dimension-order routing, shortest direction per dimension (ties go +).
* ``fully_connected``: the direct link.
* inter-node ``switch``: source node NIC up-link → destination node NIC down-link.
* inter-node ``fat_tree``: NIC up → (if the leaves differ) leaf→spine → spine→leaf → NIC down;
  the spine is ``(src_node + dst_node) % spines`` (deterministic ECMP).
* Rail-aware between nodes (a rail-optimized fabric: GPU i of every node on rail i): chip ``c``
  of a node owns the network planes ``p`` with ``p % chips_per_node == c`` when there are at
  least as many planes as chips (one NIC each, or several), else it shares plane
  ``c % planes`` with the node's other chips on that rail. A message between nodes is striped
  evenly over the *source chip's* planes only, so a lone chip sends at its own NIC's bandwidth
  (not the node's summed bandwidth). The hop from a chip to its NIC (PCIe) and, when source
  and destination sit on different rails, the destination node's forwarding hop to the
  destination chip are not modelled; with a direct node network (ring/torus/fully_connected)
  the node's chips reach the node's router at no cost.
"""

from __future__ import annotations

import itertools

import numpy as np

from .cluster_spec import ClusterSpec

__all__ = ["Topology", "Route"]

Route = tuple[tuple[tuple[int, ...], float], ...]
"""A route: stripes of (link ids in path order, fraction of the bytes on this stripe)."""


def _coords(i: int, dims: list[int]) -> list[int]:
    out = []
    for d in dims:
        out.append(i % d)
        i //= d
    return out


def _index(c: list[int], dims: list[int]) -> int:
    i, mul = 0, 1
    for x, d in zip(c, dims):
        i += x * mul
        mul *= d
    return i


class Topology:
    """Links and routes of a :class:`ClusterSpec` (built once; routes memoized)."""

    def __init__(self, spec: ClusterSpec) -> None:
        self.spec = spec
        self.n_chips = spec.n_chips
        self._link: dict[tuple, int] = {}
        self.names: list[str] = []
        bw: list[float] = []
        lat: list[float] = []
        self._bw, self._lat = bw, lat
        self._build()
        self.bandwidth = np.array(bw, dtype=np.float64)   # bytes/s per link
        self.latency = np.array(lat, dtype=np.float64)     # s per link
        self._routes: dict[tuple[int, int], Route] = {}

    # ---- construction --------------------------------------------------------------------
    def _add(self, key: tuple, gbps: float, lat_us: float) -> None:
        if key not in self._link:
            self._link[key] = len(self.names)
            self.names.append("/".join(map(str, key)))
            self._bw.append(gbps * 1e9)
            self._lat.append(lat_us * 1e-6)

    def _neighbours(self, kind: str, count: int, dims: list[int] | None):
        """(src, dst) index pairs of the direct links of a ring/torus/fully_connected group."""
        if kind == "fully_connected":
            return [(a, b) for a in range(count) for b in range(count) if a != b]
        dims = dims if kind == "torus" else [count]
        pairs = []
        for a in range(count):
            c = _coords(a, dims)
            for d, size in enumerate(dims):
                for step in (1, -1):
                    if size > 1:
                        n = list(c)
                        n[d] = (c[d] + step) % size
                        pairs.append((a, _index(n, dims)))
        return pairs

    def _build(self) -> None:
        s, intra, inter = self.spec, self.spec.intra_node, self.spec.inter_node
        for u in range(s.nodes):
            if intra.topology == "switch":
                for c in range(s.chips_per_node):
                    self._add(("up", u, c), intra.link_gbps, intra.latency_us)
                    self._add(("down", u, c), intra.link_gbps, intra.latency_us)
            elif intra.topology in ("ring", "torus", "fully_connected"):
                for a, b in self._neighbours(intra.topology, s.chips_per_node, intra.dims):
                    self._add(("chip", u, a, b), intra.link_gbps, intra.latency_us)
        for p in range(inter.planes):
            if inter.topology in ("switch", "fat_tree"):
                for u in range(s.nodes):
                    self._add(("nic_up", p, u), inter.link_gbps, inter.latency_us)
                    self._add(("nic_down", p, u), inter.link_gbps, inter.latency_us)
                if inter.topology == "fat_tree" and s.nodes > inter.nodes_per_leaf:
                    up = inter.uplink_gbps or inter.link_gbps
                    for leaf, sp in itertools.product(range(s.nodes // inter.nodes_per_leaf),
                                                      range(inter.spines)):
                        self._add(("leaf_up", p, leaf, sp), up, inter.latency_us)
                        self._add(("spine_down", p, sp, leaf), up, inter.latency_us)
            elif inter.topology in ("ring", "torus", "fully_connected"):
                for a, b in self._neighbours(inter.topology, s.nodes, inter.dims):
                    self._add(("node", p, a, b), inter.link_gbps, inter.latency_us)

    # ---- routing -------------------------------------------------------------------------
    def _walk(self, kind: str, a: int, b: int, dims: list[int] | None, count: int) -> list[tuple]:
        """Index pairs hopped from a to b in a ring/torus/fully_connected group."""
        if kind == "fully_connected":
            return [(a, b)]
        dims = dims if kind == "torus" else [count]
        ca, cb = _coords(a, dims), _coords(b, dims)
        hops = []
        for d, size in enumerate(dims):
            fwd = (cb[d] - ca[d]) % size
            step = 1 if fwd <= size - fwd else -1
            for _ in range(fwd if step == 1 else size - fwd):
                nxt = list(ca)
                nxt[d] = (ca[d] + step) % size
                hops.append((_index(ca, dims), _index(nxt, dims)))
                ca = nxt
        return hops

    def route(self, src: int, dst: int) -> Route:
        """The stripes a message from chip ``src`` to chip ``dst`` takes (memoized)."""
        key = (src, dst)
        r = self._routes.get(key)
        if r is not None:
            return r
        if not (0 <= src < self.n_chips and 0 <= dst < self.n_chips) or src == dst:
            raise ValueError(f"route {src}->{dst}: chips must differ and be in 0..{self.n_chips - 1}")
        s, L = self.spec, self._link
        cpn = s.chips_per_node
        u, cu, v, cv = src // cpn, src % cpn, dst // cpn, dst % cpn
        if u == v:
            kind = s.intra_node.topology
            if kind == "switch":
                path = (L[("up", u, cu)], L[("down", u, cv)])
            else:
                path = tuple(L[("chip", u, x, y)]
                             for x, y in self._walk(kind, cu, cv, s.intra_node.dims, cpn))
            r = ((path, 1.0),)
        else:
            inter, stripes = s.inter_node, []
            planes = self.planes_of(src)
            for p in planes:
                if inter.topology in ("switch", "fat_tree"):
                    path = [L[("nic_up", p, u)]]
                    lu, lv = u // inter.nodes_per_leaf, v // inter.nodes_per_leaf
                    if inter.topology == "fat_tree" and lu != lv:
                        sp = (u + v) % inter.spines
                        path += [L[("leaf_up", p, lu, sp)], L[("spine_down", p, sp, lv)]]
                    path.append(L[("nic_down", p, v)])
                else:
                    path = [L[("node", p, x, y)]
                            for x, y in self._walk(inter.topology, u, v, inter.dims, s.nodes)]
                stripes.append((tuple(path), 1.0 / len(planes)))
            r = tuple(stripes)
        self._routes[key] = r
        return r

    def planes_of(self, chip: int) -> tuple[int, ...]:
        """The inter-node planes (rails, NICs) chip ``chip`` sends on (see the module docstring)."""
        cpn, planes = self.spec.chips_per_node, self.spec.inter_node.planes
        c = chip % cpn
        if planes >= cpn:
            return tuple(range(c, planes, cpn))
        return (c % planes,)

    def uncontended_seconds(self, src: int, dst: int, nbytes: float) -> float:
        """Closed form of one message alone on the network: the slowest stripe's
        bytes / (its narrowest link) + the sum of its links' latencies."""
        return max(frac * nbytes / self.bandwidth[list(path)].min() + self.latency[list(path)].sum()
                   for path, frac in self.route(src, dst))

    @property
    def n_links(self) -> int:
        return len(self.names)
