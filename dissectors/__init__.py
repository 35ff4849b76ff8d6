"""The protocols streamdump decodes: one subpackage per protocol, as Wireshark's epan/dissectors.

Each folder holds its spec (spec.yaml, the registry entry, as data) and the code the spec
cannot say, declared in the package's DISSECTOR (streamdump.spec.dissector). The core
finds the folders by scanning for spec files; nothing here lists them.
"""
