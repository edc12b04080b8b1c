"""The guest suite (collected only inside the guest: tests/vm/conftest.py); its fixtures (`systemd_pods`)
are in tests/conftest.py."""
