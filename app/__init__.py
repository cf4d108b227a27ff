"""tilewright.app: the application layer — the command line (:mod:`~tilewright.app.cli`), the
flows that drive several layers at once (:mod:`~tilewright.app.flows`: the demo, RTL co-simulation
of a model, the hls4ml comparison), the EDA tools (:mod:`~tilewright.app.eda`: Yosys, nextpnr,
hand-off files) and design-space exploration (:mod:`~tilewright.app.sweep`).

It is the top of the import graph: nothing below it imports it (``docs/design.md``, layers).
"""
