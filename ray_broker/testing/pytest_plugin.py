"""pytest fixtures for an application's own tests against a broker (loaded by pytest through the
`pytest11` entry point once ray-broker is installed; nothing starts unless a test asks for them).

- `servicebus` (one per test session): a running broker, `ray_broker.testing.TestBroker`, with the
  entities of the emulator's `Config.json` named by `--servicebus-config` or the ini option
  `servicebus_config` (relative to the rootdir).
- `servicebus_clean`: the same broker, with every queue and subscription emptied (dead letters
  too) before the test, so that no test sees another's messages.
- `servicebus_queue`: the name of a queue of the test's own, deleted after it.
"""
from __future__ import annotations

import uuid
from pathlib import Path
from typing import Any, Iterator

import pytest

CONFIG_OPTION = "--servicebus-config"
CONFIG_INI = "servicebus_config"


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("servicebus", "ray-broker's Service Bus test host")
    group.addoption(CONFIG_OPTION, default=None, metavar="PATH",
                    help="the emulator's Config.json whose entities the servicebus fixture creates")
    parser.addini(CONFIG_INI, "the emulator's Config.json whose entities the servicebus fixture creates "
                              "(relative to the rootdir)", default="")


def _config_path(config: pytest.Config) -> str | None:
    given = config.getoption(CONFIG_OPTION)
    if given:
        return str(given)
    ini = str(config.getini(CONFIG_INI) or "")
    return str(Path(config.rootpath) / ini) if ini else None


@pytest.fixture(scope="session")
def servicebus(request: pytest.FixtureRequest) -> Iterator[Any]:
    """A broker for the whole test session (`ray_broker.testing.TestBroker`)."""
    from .host import emulator

    with emulator(config=_config_path(request.config)) as broker:
        yield broker


@pytest.fixture
def servicebus_clean(servicebus: Any) -> Any:
    """The session's broker, every queue and subscription emptied before the test."""
    servicebus.empty()
    return servicebus


@pytest.fixture
def servicebus_queue(servicebus: Any) -> Iterator[str]:
    """A queue of the test's own (its name), deleted after the test."""
    name = f"test-{uuid.uuid4().hex[:12]}"
    servicebus.namespace.create_queue(name)
    yield name
    servicebus.namespace.delete_queue(name)
