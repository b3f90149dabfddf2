"""``python -m nbtune``: the same command line as the ``nbtune`` script."""

from nbtune.cli import main

if __name__ == "__main__":
    raise SystemExit(main())
