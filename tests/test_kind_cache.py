"""The per-process cache of compiled layer kinds (:func:`~tilewright.dataflow_sim.compile_flow.
kind_totals`, used by ``kinds_step_cost`` for sweeps and ``compile``): a cached answer equals a
fresh :func:`~tilewright.dataflow_sim.compile_flow.compile_llm` of the same kind, design and
shape, and every input the compile reads (the ArchSpec, the format, the phase, seq, batch, the
kind) gives its own entry — never another design's stale totals.

Reference: ``compile_llm(...).totals()`` (the compile path, no cache) for each case.
"""

from __future__ import annotations

from tests.test_hf_configs import ARCH, SMALL, _write
from tilewright.arch import load_arch
from tilewright.dataflow_sim import compile_flow
from tilewright.dataflow_sim.compile_flow import clear_kind_cache, compile_llm, kind_totals


def test_cached_kind_totals_equal_a_fresh_compile_for_every_key(tmp_path):
    path = _write(tmp_path, "Mamba2ForCausalLM", SMALL["Mamba2ForCausalLM"])
    a = load_arch(ARCH)
    b = a.model_copy(update={"tensor_engine": a.tensor_engine.model_copy(
        update={"rows": 8, "cols": 8})})
    clear_kind_cache()
    cases = [(a, "prefill", 16, 1, "int8"), (b, "prefill", 16, 1, "int8"),
             (a, "decode", 16, 1, "int8"), (a, "prefill", 16, 2, "bf16")]
    got = [kind_totals(arch, path, kind="layer", phase=ph, seq=s, batch=bt, fmt=f)
           for arch, ph, s, bt, f in cases]
    assert len(compile_flow._KIND_TOTALS) == len(cases)        # one entry per distinct input
    again = kind_totals(a, path, kind="layer", phase="prefill", seq=16, batch=1, fmt="int8")
    assert again == got[0] and len(compile_flow._KIND_TOTALS) == len(cases)   # a hit
    for (arch, ph, s, bt, f), totals in zip(cases, got):
        ref = compile_llm(path, arch, seq=s, batch=bt, phase=ph, fmt=f, execute=False).totals()
        assert totals == ref, (ph, s, bt, f, arch.tensor_engine.rows)
    assert got[0]["total_cycles"] != got[1]["total_cycles"]      # the design changes the cost
    assert _kind_graph_hits() >= 1                               # b reused a's exported graph


def _kind_graph_hits() -> int:
    return compile_flow._kind_graph.cache_info().hits
