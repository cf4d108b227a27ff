"""Co-simulation: every generated design (:mod:`~tilewright.cosim.tops`: one ``Top`` each, in the
registry ``TOPS``) built with Verilator (:mod:`~tilewright.cosim.build`, cached by the generator's
import closure) and run through one entry (:func:`tilewright.cosim.sim.run` -> ``SimRun``): the
cocotb benches through one job folder (:mod:`~tilewright.cosim.job`), the C++ fast drivers through
their pipe (:mod:`~tilewright.cosim.fast_runs`). Each top's job encoding is in a ``*_jobs``
module."""
