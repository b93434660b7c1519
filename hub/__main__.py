import os
import sys

from .cli import main

# ``pub0sub hub`` execs this module and says so (PUB0SUB_PROG), so usage and errors name the
# command the user typed.
sys.exit(main(prog=os.environ.pop("PUB0SUB_PROG", "python -m hub")))
