"""``python -m schedlock``: the same as the ``schedlock`` command."""

import sys

from schedlock._cli import main

sys.exit(main())
