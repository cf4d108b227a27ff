"""ArchSpec presets users start from (YAML). Packaged as ``tilewright.configs``."""
