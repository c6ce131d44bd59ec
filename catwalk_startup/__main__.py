"""`python -m catwalk_startup`: every interpreter of this environment patches Tango at start."""

from . import write_pth

print(f"{write_pth()}: from interpreter start, Tango's log records are JSON, its errors one line")
