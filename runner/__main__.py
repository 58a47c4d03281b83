"""``python -m runner``: see :mod:`runner.cli`."""
import sys

from runner.cli import main

sys.exit(main())
