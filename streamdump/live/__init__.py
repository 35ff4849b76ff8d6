"""Live capture: a capturing process that writes a pcap stream, read as `read -` reads one."""
