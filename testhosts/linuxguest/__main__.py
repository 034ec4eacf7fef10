"""``python -m testhosts.linuxguest [CACHE]``: build (or find) the test guest; print its dir."""

import sys
from pathlib import Path

from testhosts.linuxguest.build import CACHE, build

print(build(Path(sys.argv[1]) if len(sys.argv) > 1 else CACHE))
