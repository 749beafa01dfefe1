"""`python -m dispatcher` is the `dispatcher` command."""

import sys

from dispatcher.cli import main

sys.exit(main())
