"""`python -m pyipu`: the `pyipu` command (PopRT's CLI)."""

import sys

from pyipu.cli.main import main

sys.exit(main())
