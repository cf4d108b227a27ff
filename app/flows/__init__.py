"""Flows that cross layers: the demo, a model's layer on the RTL, the hls4ml comparison."""
