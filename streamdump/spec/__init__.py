"""The registry and what is compiled from it: spec loading and validation, field layouts, the
generated fast path, the decoder and encoder, hooks, and the protocol packages' contract."""
