"""Cluster files: presets load, bad files give one-line errors, routes follow the stated rules."""

from __future__ import annotations

import itertools

import pytest

from tilewright.dataflow_sim.cluster import (CLUSTER_PRESET_DIR, ClusterSpec, ClusterSpecError,
                                             Topology, load_cluster)

GPU = "chip: {kind: gpu, preset: h100-sxm}\n"


def test_presets_load_and_have_the_promised_shapes():
    sizes = {p.stem: load_cluster(p).n_chips for p in CLUSTER_PRESET_DIR.glob("*.yaml")}
    assert sizes["h100-8x-nvlink"] == 8 and sizes["torus-1024"] == 1024
    pd = load_cluster("pd-h100-64")
    assert pd.pools is not None and 0 < pd.pools.prefill_chips < pd.n_chips
    torus = load_cluster("torus-1024")
    assert torus.arch() is not None and torus.arch().tensor_engine.rows == 64


@pytest.mark.parametrize("text,needle", [
    (GPU + "nodes: 2\ninter_node: {topology: switch, link_gbps: -1}",
     "inter_node.link_gbps = -1: must be a number above 0"),
    ("chip: {kind: gpu, preset: b200}", "chip.preset = 'b200': must be one of"),
    ("chip: {kind: fpga}", "chip.kind = 'fpga': must be one of 'gpu', 'arch'"),
    ("chip: {preset: h100-sxm}", "chip.kind = (missing)"),
    (GPU + "bogus: 1", "bogus = (unknown key)"),
    (GPU + "nodes: 8\ninter_node: {topology: torus, dims: [2, 2]}",
     "inter_node.dims = [2, 2]: torus dims must be positive integers whose product is 8"),
    (GPU + "chips_per_node: 4", "intra_node.topology = 'none': chips_per_node = 4 needs a fabric"),
    (GPU + "nodes: 3", "inter_node.topology = 'none': nodes = 3 needs a network"),
    ("chip: {kind: arch, arch: {tensor_engine: {rows: 0, cols: 4, dataflow: ws}}, hbm_gib: 1}",
     "tensor_engine.rows = 0: must be an integer from 1 to 512"),
    ("chip: {kind: arch, arch: ws8x8}", "chip.arch.offchip.capacity_gib = (missing): a cluster "
     "chip needs its off-chip capacity in GiB"),
    (GPU + "chips_per_node: 2\nintra_node: {topology: switch}\npools: {prefill_chips: 2}",
     "pools.prefill_chips = 2: must be from 1 to 1"),
    (GPU + "nodes: 6\ninter_node: {topology: fat_tree, nodes_per_leaf: 4}",
     "inter_node.nodes_per_leaf = 4: must divide nodes = 6"),
    ("chip: [unclosed", "is not valid YAML"),
])
def test_bad_cluster_files_give_one_line_errors(tmp_path, text, needle):
    path = tmp_path / "bad.yaml"
    path.write_text(text)
    with pytest.raises(ClusterSpecError) as err:
        load_cluster(path)
    msg = str(err.value)
    assert "\n" not in msg and needle in msg and msg.startswith(str(path)), msg
    assert isinstance(err.value, ValueError)


def test_missing_file_names_the_presets():
    with pytest.raises(ClusterSpecError, match="presets are: .*h100-8x-nvlink"):
        load_cluster("no-such-cluster")


def _spec(**kw) -> ClusterSpec:
    return ClusterSpec.from_dict({"chip": {"kind": "gpu", "preset": "h100-sxm"}, **kw})


def test_torus_routes_take_the_wraparound_manhattan_distance():
    dims = [4, 3, 5]
    topo = Topology(_spec(nodes=60, inter_node={"topology": "torus", "dims": dims,
                                                "link_gbps": 1, "latency_us": 1}))
    assert topo.n_links == 60 * 6 - 60 * 0   # 6 neighbours each (all dims > 2)
    for a, b in itertools.product(range(0, 60, 7), range(0, 60, 5)):
        if a == b:
            continue
        ca = (a % 4, a // 4 % 3, a // 12)
        cb = (b % 4, b // 4 % 3, b // 12)
        hops = sum(min(abs(x - y), d - abs(x - y)) for x, y, d in zip(ca, cb, dims))
        (path, frac), = topo.route(a, b)
        assert len(path) == hops and frac == 1.0
        assert topo.uncontended_seconds(a, b, 1e9) == pytest.approx(1.0 + hops * 1e-6)


def test_fat_tree_and_planes():
    topo = Topology(_spec(nodes=8, chips_per_node=2,
                          intra_node={"topology": "switch", "link_gbps": 100},
                          inter_node={"topology": "fat_tree", "nodes_per_leaf": 2, "spines": 2,
                                      "planes": 4, "link_gbps": 10, "uplink_gbps": 5}))
    assert [len(p) for p, _ in topo.route(0, 1)] == [2]          # same node: up + down
    same_leaf = topo.route(0, 2)                                   # node 0 -> node 1
    # rail-aware: chip 0 of a node owns planes 0 and 2 of the 4 (chip 1 owns 1 and 3)
    assert len(same_leaf) == 2 and all(len(p) == 2 and f == 0.5 for p, f in same_leaf)
    far = topo.route(0, 15)                                        # node 0 -> node 7
    assert all(len(p) == 4 for p, _ in far)
    # striped over chip 0's 2 planes, each limited by its 5 GB/s leaf-spine link
    assert topo.uncontended_seconds(0, 15, 4e9) == pytest.approx(2e9 / 5e9)


def test_ring_goes_the_short_way():
    topo = Topology(_spec(chips_per_node=8, intra_node={"topology": "ring", "link_gbps": 1}))
    assert len(topo.route(0, 7)[0][0]) == 1 and len(topo.route(0, 3)[0][0]) == 3
    assert len(topo.route(0, 5)[0][0]) == 3


def test_arch_chip_capacity_and_vector_lanes_live_in_the_archspec():
    """offchip.capacity_gib and vector_unit.lanes are read from the ArchSpec; the old cluster
    keys still work with a FutureWarning when the ArchSpec leaves the fact unset, and are an
    error when they contradict it. The optional field leaves existing ArchSpecs' hash alone."""
    from tilewright.arch import ArchSpec
    from tilewright.dataflow_sim.cluster import chip_model

    te = {"rows": 8, "cols": 8, "dataflow": "ws"}
    base = {"name": "a", "tensor_engine": te}
    assert "capacity_gib" not in ArchSpec.from_dict(base).to_yaml()
    assert ArchSpec.from_dict(base).content_hash() == ArchSpec.from_dict(
        {**base, "offchip": {"capacity_gib": None}}).content_hash()

    def spec(arch: dict, **chip) -> ClusterSpec:
        return ClusterSpec.from_dict({"name": "c", "chip": {"kind": "arch", "arch": arch, **chip}})

    new = spec({**base, "offchip": {"capacity_gib": 12}, "vector_unit": {"lanes": 64}})
    m = chip_model(new)
    assert m.hbm_bytes == 12 * 2**30
    assert m.vector_flops_per_s == 64 * new.arch().clock_mhz * 1e6
    assert chip_model(spec({**base, "offchip": {"capacity_gib": 1}})).vector_flops_per_s \
        == 8 * new.arch().clock_mhz * 1e6                       # no vector unit: te.cols
    with pytest.warns(FutureWarning, match="chip.hbm_gib is deprecated"):
        old = spec(base, hbm_gib=3, vector_ops_per_cycle=16)
    assert chip_model(old).hbm_bytes == 3 * 2**30          # warned once, at load
    assert chip_model(old).vector_flops_per_s == 16 * new.arch().clock_mhz * 1e6
    with pytest.raises(ClusterSpecError, match="chip.hbm_gib = 3.0 contradicts the ArchSpec's "
                                               "offchip.capacity_gib = 12"):
        spec({**base, "offchip": {"capacity_gib": 12}}, hbm_gib=3)
    with pytest.raises(ClusterSpecError, match="vector_ops_per_cycle = 16 contradicts"):
        spec({**base, "offchip": {"capacity_gib": 1}, "vector_unit": {"lanes": 64}},
             vector_ops_per_cycle=16)
    with pytest.raises(ClusterSpecError, match=r"offchip.capacity_gib = \(missing\)"):
        spec(base)
