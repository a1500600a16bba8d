"""``make readme``: regenerate every generated table of the README and the docs pages.

The env id table moved to ``docs/environments/index.md`` and the results tables joined it:
``scripts/update_docs.py`` is the one generator (``--check`` exits non-zero on a stale page).
This name stays for the Makefile target and ``tests/test_registration_cli.py``.
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from update_docs import main  # noqa: E402

if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
