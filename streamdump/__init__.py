"""streamdump: a protocol analyzer for messaging wire protocols, driven by the specs in dissectors/."""

__version__ = "0.1.0"
