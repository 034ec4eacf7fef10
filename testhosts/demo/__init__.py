"""The demo: two running KVM guests share one volume through virtdriver (``scripts/demo.sh``).

:mod:`.story` tells it with OS-less guests; :mod:`.view` adds a line from inside each of two small
Linux guests (``--guest-view``). It lives with the test hosts it starts, not in the product.
"""
