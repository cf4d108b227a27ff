"""The cocotb benches: the modules a Verilator simulation loads (``*_bench``) and their shared
helpers. Each bench reads its job folder (``$TILEWRIGHT_JOB``, written by
:mod:`tilewright.cosim`), drives its top and writes the results back. Installed with the package,
because the CLI runs them; the pytest tests that launch them live in ``tests/``.
"""
