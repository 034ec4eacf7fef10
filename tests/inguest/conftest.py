"""The in-guest tests share one pair of Linux guests, booted for this package and removed after
its last test (idle TCG guests are not left running through the rest of the suite)."""

from tests.support.linuxguest import (  # noqa: F401 - fixtures, found by name
    linux_image,
    linux_pair,
)
