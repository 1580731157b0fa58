"""``python -m attndyn.cli``: the same as the ``attndyn`` command."""

from . import main

raise SystemExit(main())
