"""The protocol-agnostic core: capture files, packets, TCP reassembly, the framing engine, the
pipeline from segments to frames, and the conversation tracker engine driven by a spec."""
