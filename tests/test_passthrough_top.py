"""The worked example of adding a top (docs/design.md, "Add a top"): a passthrough pipeline
declared once in the registry, generated, built by Verilator and run by cocotb through the same
``run`` as every other top. Reference: the identity, and the latency closed form."""

from __future__ import annotations

import numpy as np
import pytest

from tilewright.cosim.sim import run
from tilewright.cosim.tops import TOPS
from tilewright.rtl.passthrough import PassthroughParams, passthrough_cycles


def test_the_passthrough_is_one_registry_entry():
    top = TOPS["passthrough"]
    assert top.module == "tw_passthrough" and top.drivers == ("cocotb",)
    assert top.bench == "tilewright.cocotb_tests.passthrough_bench"


@pytest.mark.parametrize("params,bad", [({"width": 0}, "width"), ({"latency": 0}, "latency")])
def test_passthrough_params_are_checked(params, bad):
    with pytest.raises(ValueError, match=bad):
        PassthroughParams(**params)


def test_a_word_too_wide_is_refused_before_any_build():
    with pytest.raises(ValueError, match="fit in 4 bits"):
        run("passthrough", [16], PassthroughParams(width=4, latency=1))


@pytest.mark.verilator
def test_passthrough_on_verilator_is_the_identity_with_its_latency():
    params = PassthroughParams(width=12, latency=3)
    words = np.random.default_rng(7).integers(0, 1 << 12, size=40).tolist()
    res = run("passthrough", words, params)
    rec = res.records[0]
    assert rec["outputs"] == words
    delays = np.array(rec["out_cycles"]) - np.array(rec["in_cycles"])
    assert (delays == passthrough_cycles(params.latency)).all()
    with pytest.raises(ValueError, match="no 'fast' driver"):
        run("passthrough", words, params, driver="fast")
