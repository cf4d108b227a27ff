"""Co-simulation: builds generated Verilog with Verilator and runs cocotb benches that execute Programs."""
