"""What an operator asks of a host: :mod:`.doctor` (can it share volumes?) and :mod:`.audit`."""
