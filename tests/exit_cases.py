"""Ways a console script's main can end, for tests/test_commands.py (imports nothing heavy:
a fresh interpreter runs each too)."""

import sys


def returns_none():
    return None


def exits_3():
    sys.exit(3)


def exits_with_a_message():
    sys.exit("a message")


def raises():
    raise ValueError("an error")


def interrupted():
    raise KeyboardInterrupt


ALL = [returns_none, exits_3, exits_with_a_message, raises, interrupted]
