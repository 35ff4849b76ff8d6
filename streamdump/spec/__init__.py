"""Floor 3, the spec: the registry and what is compiled from it. Loading and validating specs,
field layouts, the generated fast path, the decoder and encoder, hooks and the budget of what
expanding a frame may produce, framing rules from a spec's length field, and the protocol
packages' contract (what a DISSECTOR declares)."""
