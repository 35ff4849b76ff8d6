"""Floor 5, a front end: what users read on a terminal or in a file, from an analysis session.

One line, the detail tree and JSON per frame, `--messages`, the `stats` tables, `follow`'s
dialogue, and the progress bar of long reads.
"""
