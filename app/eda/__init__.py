"""EDA tools on generated designs: Yosys synthesis, nextpnr place and route, hand-off files."""
