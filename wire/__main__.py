"""``python -m wire``: the same decoder CLI as ``pub0sub decode``."""

from __future__ import annotations

import sys

from .cli import main

if __name__ == "__main__":
    sys.exit(main(prog="python -m wire"))
