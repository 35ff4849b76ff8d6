"""`python -m streamdump` and the `streamdump` command (`run`): the command line, started
without the cyclic garbage collector.

A start imports a few hundred modules and reads the registry back: objects that live as long
as the process, which the collector would only walk (about 3% of a small capture's read).
It stays off until the read's setup is made (cli/base.py's prepare, which freezes that setup
out of the collector's sight and turns it on); commands that make no setup (`lua`, `docs`)
write their files without it.
"""

import gc


def run() -> None:
    gc.disable()
    from streamdump.cli import main

    main()


if __name__ == "__main__":
    run()
