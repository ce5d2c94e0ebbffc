"""``python -m daisychain.peer``: see main.py."""

from daisychain.peer.main import main

raise SystemExit(main())
