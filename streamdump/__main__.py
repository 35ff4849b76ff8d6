"""python -m streamdump: the same command line as the streamdump script."""

from streamdump.cli import main

main()
