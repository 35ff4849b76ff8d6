"""Floor 4, the analysis: from segments to analysed frames, the one path every front end takes.

The pipeline (connections, framing, decoding, recovery behind gaps), the conversation tracker
engine and the rules protocol packages add to it, how connections ended, the display-filter
language and its field names, the statistics, and the session that ties them together for a
source (a file, a pipe, a live stream, a proxy, a Spark task's segments, hex) and the read's
options. It prints nothing: front ends show what it gives.
"""
