"""tilewright: describe an AI accelerator once; compile torch models for it, generate its RTL and
simulate it at several levels that are checked against each other. See docs/design.md."""

__version__ = "0.1.0"
