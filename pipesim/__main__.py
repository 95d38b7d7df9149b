"""``python -m pipesim`` runs the command line.

The command line is the package above this one (``cli``, the project's front door); the
simulator never imports it, so this entry runs it by name, as the ``pipesim`` console script
does (``cli.main:main``).
"""

import runpy

if __name__ == "__main__":
    runpy.run_module("cli", run_name="__main__", alter_sys=True)
