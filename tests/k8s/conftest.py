"""Fixtures for the Kubernetes / YARN tests: checked-in payloads, TLS material, a controllable clock."""

from __future__ import annotations

from pathlib import Path

import pytest
from kit.clock import FakeClock
from kit.fakes.tls import TlsFiles, make_tls

FIXTURES = Path(__file__).resolve().parent.parent / "fixtures"


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock()


@pytest.fixture(scope="session")
def tls_files(tmp_path_factory: pytest.TempPathFactory) -> TlsFiles:
    try:
        return make_tls(tmp_path_factory.mktemp("tls"))
    except FileNotFoundError as err:
        pytest.skip(f"cannot make test certificates: {err}")


@pytest.fixture
def fixtures() -> Path:
    return FIXTURES
