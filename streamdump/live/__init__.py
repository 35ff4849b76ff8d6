"""Floor 5, a front end: traffic as it happens. Live capture (a capturing process writing a pcap
stream, read as `read -` reads one) and the decoding proxy (connections passed through and decoded
on the way)."""
