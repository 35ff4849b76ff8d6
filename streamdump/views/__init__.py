"""What users read: one line, the detail tree and JSON per frame, `--messages`, `stats`,
`follow`, the `--filter` language and its field names, and the progress bar of long reads."""
