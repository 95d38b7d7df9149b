"""``python -m cli`` (and ``python -m pipesim``) run the command line."""

import sys

from cli.main import main

if __name__ == "__main__":
    sys.exit(main())
