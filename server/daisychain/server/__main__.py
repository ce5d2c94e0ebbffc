"""``python -m daisychain.server``: the same as ``daisychain serve``."""

from daisychain.server.main import main

raise SystemExit(main())
