"""``python -m daisychain`` is the same as the ``daisychain`` command."""

from daisychain.cli import main

raise SystemExit(main())
