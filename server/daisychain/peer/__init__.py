"""The headless peer: ``python -m daisychain.peer`` (see main.py)."""
