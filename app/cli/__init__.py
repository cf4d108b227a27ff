"""The ``tilewright`` command line: :mod:`~tilewright.app.cli.main` holds the Typer app and the
error path, one module per command group beside it."""
