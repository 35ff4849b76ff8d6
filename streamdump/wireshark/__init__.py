"""The Wireshark plugin: the Lua generator and the Lua interpreter of the registry it embeds."""
