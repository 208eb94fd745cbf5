"""One engine per spawned process: the protocol (`events`), the parent side (`process`), the child (`child`)."""
