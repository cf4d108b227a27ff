"""Every answer is to the question asked: a command computes the design and workload it was given,
or refuses in one line naming the file, field or flag and what is accepted — never a field
ignored, never another design substituted (docs/design.md, "The error path").

Each test states the behaviour asked for (exit status 2, one ``error:`` line, no traceback, the
field named), not an earlier output. None of the refusals builds a simulator.
"""

from __future__ import annotations

import pytest

from tests.test_cli import tw
from tilewright.arch import ArchSpec, ArchSpecError

WS4 = {"name": "ws4x4", "tensor_engine": {"rows": 4, "cols": 4, "dataflow": "ws"},
       "memory": {"scratchpad_kib": 64, "accumulator_kib": 64}}


def _refused(proc, *needles: str) -> str:
    """The one ``error:`` line of a refusal (exit status 2, no traceback) holding ``needles``."""
    out = proc.stderr + proc.stdout
    assert proc.returncode == 2, out
    assert "Traceback" not in out, out
    lines = [line for line in proc.stderr.strip().splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith("error: "), proc.stderr
    for needle in needles:
        assert needle in lines[0], lines[0]
    return lines[0]


def _yaml(tmp_path, name: str, data: dict) -> str:
    import yaml
    path = tmp_path / f"{name}.yaml"
    path.write_text(yaml.safe_dump(data))
    return str(path)


# ---- 1. an ArchSpec with a mesh: the single-core commands would ignore the mesh ---------------
@pytest.mark.parametrize("args", [
    ["cycles", "--arch", "configs/wse2.yaml", "-m", "64", "-k", "64", "-n", "64"],
    ["compile", "--model", "tiny-llama", "--arch", "wse2"],
    ["rtl", "--arch", "mesh4x4", "-o", "OUT"],
    ["sim", "--model", "tiny-llama", "--arch", "wse2"],
])
def test_single_core_commands_refuse_a_mesh_archspec(tmp_path, args):
    args = [str(tmp_path / "out") if a == "OUT" else a for a in args]
    line = _refused(tw(*args), "mesh", "tilewright mesh-layer", f"tilewright {args[0]}")
    assert args[args.index("--arch") + 1] in line        # names the file given
    assert not (tmp_path / "out").exists()


def test_mesh_commands_still_take_the_mesh_archspec():
    proc = tw("mesh", "gemv", "--arch", "wse2", "--k", "4096", "--n", "4096", "--json")
    assert proc.returncode == 0, proc.stderr


# ---- 1b. mesh commands: the ArchSpec's single-core sections and another element size --------
def _mesh4x4(**changes) -> dict:
    data = {"name": "m4", "tensor_engine": {"rows": 1, "cols": 4, "dataflow": "os"},
            "mesh": {"rows": 4, "cols": 4, "core_sram_kib": 16, "core_macs_per_cycle": 4}}
    for key, value in changes.items():
        section, _, field = key.partition("__")
        data.setdefault(section, {})[field] = value
    return data


@pytest.mark.parametrize("changes,needles", [
    # a host core's memory/offchip/vector unit: no mesh command reads them, yet area and energy
    # counted them (an 8x8 fp32 array and a 4x4x4 cube gave the same mesh cycles)
    ({"memory__scratchpad_kib": 48}, ("memory: not read by a mesh design", "core_sram_kib")),
    ({"offchip__bandwidth_gbps": 1200.0}, ("offchip: not read by a mesh design",)),
    ({"vector_unit__lanes": 8}, ("vector_unit: not read by a mesh design",)),
    # tensor_engine is each core's engine: its MACs per cycle are the mesh core's
    ({"tensor_engine__rows": 8, "tensor_engine__cols": 8},
     ("mesh.core_macs_per_cycle = 4", "does 64 MACs per cycle: they must be equal")),
])
def test_mesh_commands_refuse_archspec_sections_they_would_ignore(tmp_path, changes, needles):
    path = _yaml(tmp_path, "m4", _mesh4x4(**changes))
    _refused(tw("mesh", "gemv", "--arch", path, "--k", "64", "--n", "64"), path, *needles)


def test_mesh_element_size_is_the_cores_format(tmp_path):
    """--elem-bytes follows tensor_engine.input_format (which also sets the cores' area and MAC
    energy); another value is refused, not run as a second design."""
    import json
    from tilewright.dataflow_sim.mesh import mesh_gemv
    from tilewright.arch import load_arch
    _refused(tw("mesh", "gemv", "--arch", "mesh4x4", "--k", "64", "--n", "64", "--elem-bytes",
                "2"), "--elem-bytes 2", "int8 (1 byte per element)")
    for arch, eb, k in (("mesh4x4", 1, 256), ("wse2", 2, 4096)):   # int8 and bf16 cores
        proc = tw("mesh", "gemv", "--arch", arch, "--k", str(k), "--n", str(k), "--json")
        assert proc.returncode == 0, proc.stderr
        spec = load_arch(arch)
        want = mesh_gemv(spec, k, k, elem_bytes=eb).cycles
        assert json.loads(proc.stdout)["cycles"] == want
        assert mesh_gemv(spec, k, k, elem_bytes=3 - eb).cycles != want


# ---- 2. sim --rtl --top axi-accel: the AxiRam's latency is not the ArchSpec's ----------------
def test_axi_accel_refuses_an_offchip_latency_the_axi_ram_does_not_have(tmp_path):
    slow = _yaml(tmp_path, "slow", {**WS4, "name": "slow-mem",
                                    "offchip": {"bandwidth_gbps": 2.0, "latency_ns": 10000.0}})
    line = _refused(tw("sim", "--model", "tiny-mamba", "--arch", slow, "--rtl", "--top",
                       "axi-accel"), "offchip.latency_ns = 10000", "accepted: "
                    "offchip.latency_ns = 6")
    assert "5000 cycles" in line       # 10 µs at 500 MHz


def test_axi_latency_check_accepts_the_axi_ram_latency():
    from tilewright.compiler.codegen import memory_latency_cycles
    from tilewright.cosim.program_jobs import AXI_RAM_READ_LATENCY, check_axi_latency
    ok = ArchSpec.from_dict({**WS4, "offchip": {"bandwidth_gbps": 2.0, "latency_ns": 6.0}})
    assert check_axi_latency(ok) is ok and memory_latency_cycles(ok) == AXI_RAM_READ_LATENCY
    with pytest.raises(ArchSpecError, match="offchip.latency_ns = 100"):
        check_axi_latency(ArchSpec.from_dict(WS4))          # the default 100 ns: 50 cycles


# ---- 3. the bf16 RTL path honours the ArchSpec's memory sizes ---------------------------------
BF16 = {"tensor_engine": {"rows": 4, "cols": 4, "dataflow": "ws", "input_format": "bf16",
                          "weight_format": "bf16", "accumulator_format": "fp32"}}


def test_bf16_core_buffers_are_the_archspecs():
    from tilewright.cosim.bf16_jobs import Bf16Params
    arch = ArchSpec.from_dict({**BF16, "memory": {"scratchpad_kib": 2, "accumulator_kib": 1}})
    # 1 KiB each for A and B (rows resp. cols 16-bit lanes a word), 1 KiB of cols fp32 lanes
    assert Bf16Params.for_arch(arch).buffer_depths == (128, 128, 64)


def test_bf16_sim_refuses_a_gemm_larger_than_the_scratchpad(tmp_path):
    small = _yaml(tmp_path, "bf16-small", {**BF16, "name": "bf16-small",
                                           "memory": {"scratchpad_kib": 1,
                                                      "accumulator_kib": 1}})
    _refused(tw("sim", "--model", "tiny-mamba", "--arch", small, "--rtl"),
             "memory.scratchpad_kib=1", "A buffer needs 128 words, has 64")


# ---- 4. vector_unit.transcendental_passes: the accelerator's RTL and model take one pass -----
def _passes(tmp_path, passes: int) -> str:
    return _yaml(tmp_path, f"tp{passes}", {**WS4, "name": f"tp{passes}",
                                           "vector_unit": {"lanes": 4,
                                                           "transcendental_passes": passes}})


@pytest.mark.parametrize("args", [
    ["rtl", "--top", "accel", "-o", "OUT", "--arch"],
    ["rtl", "--top", "axi-accel", "-o", "OUT", "--arch"],
    ["sim", "--model", "tiny-mamba", "--rtl", "--top", "accel", "--vector", "--arch"],
])
def test_accelerator_paths_refuse_transcendental_passes(tmp_path, args):
    args = [str(tmp_path / "out") if a == "OUT" else a for a in args] + [_passes(tmp_path, 7)]
    _refused(tw(*args), "vector_unit.transcendental_passes = 7", "accepted: 4")
    assert not (tmp_path / "out").exists()


def test_transcendental_passes_check_keeps_the_default(tmp_path):
    from tilewright.cosim.program_jobs import check_transcendental_passes
    arch = ArchSpec.from_dict({**WS4, "vector_unit": {"lanes": 4}})
    assert check_transcendental_passes(arch) is arch


# ---- 5. mesh-layer --experts on a model or phase that takes none -------------------------------
@pytest.mark.parametrize("args,needle", [
    (["tiny-llama", "--experts", ""], "tiny-llama is not an MoE model"),
    (["tiny-llama", "--experts", "0,1", "--phase", "decode"], "tiny-llama is not an MoE model"),
    (["tiny-moe", "--experts", "0,1"], "routes decode tokens"),
])
def test_mesh_layer_refuses_experts_it_would_ignore(args, needle):
    _refused(tw("mesh-layer", "--model", *args, "--arch", "mesh4x4"), "--experts", needle)


@pytest.mark.parametrize("args,needle", [
    (["deepseek-v3", "--phase", "decode"], ("context = 64", "deepseek-v3's attention is not "
                                             "modeled")),
    (["tiny-moe", "--phase", "prefill"], ("--context 64", "a prefill attends over its own "
                                          "--seq")),
    (["tiny-llama", "--phase", "prefill"], ("--context 64", "a prefill attends over its own "
                                            "--seq")),
])
def test_mesh_layer_refuses_a_context_it_would_ignore(args, needle):
    _refused(tw("mesh-layer", "--model", *args, "--context", "64", "--arch", "mesh4x4"), *needle)


# ---- 6. cluster files: fat-tree fields on another network, pools in training -------------------
GPU2 = {"name": "two-nodes", "chip": {"kind": "gpu", "preset": "h100-sxm"}, "nodes": 2}


@pytest.mark.parametrize("field,value", [("uplink_gbps", 0.01), ("spines", 4),
                                         ("nodes_per_leaf", 2)])
def test_fat_tree_fields_on_a_switch_are_refused(tmp_path, field, value):
    from tilewright.dataflow_sim.cluster import ClusterSpec, ClusterSpecError
    data = {**GPU2, "inter_node": {"topology": "switch", "link_gbps": 50, field: value}}
    with pytest.raises(ClusterSpecError, match=f"inter_node.{field} = {value}: only a fat_tree"):
        ClusterSpec.from_dict(data, source="c.yaml")
    path = _yaml(tmp_path, "c", data)
    _refused(tw("cluster", "--cluster", path, "--model", "tiny-llama", "--mode", "train"),
             path, f"inter_node.{field}", "fat_tree")


def test_fat_tree_defaults_on_a_switch_are_accepted():
    from tilewright.dataflow_sim.cluster import ClusterSpec
    spec = ClusterSpec.from_dict({**GPU2, "inter_node": {"topology": "switch", "spines": 1,
                                                         "nodes_per_leaf": 1}})
    assert spec.inter_node.topology == "switch"


def test_training_refuses_serving_pools():
    _refused(tw("cluster", "--cluster", "pd-h100-64", "--model", "tiny-llama", "--mode",
                "train", "--seq", "128"), "pools.prefill_chips = 16", "--mode serve")
