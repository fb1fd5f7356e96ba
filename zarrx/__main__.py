"""``python -m zarrx``: the ``zarrx`` command line (:mod:`zarrx.tools.cli`)."""

import sys

from zarrx.tools.cli import main

sys.exit(main())
