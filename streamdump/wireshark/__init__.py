"""Floor 5, a front end: the Wireshark plugin, its Lua generator and the Lua interpreter of the
registry it embeds."""
