"""The hand-written Lua that streamdump.luagen copies into every generated Wireshark plugin."""
