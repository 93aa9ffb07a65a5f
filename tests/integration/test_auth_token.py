"""`auth_token`: a namespace started with a token admits only clients that present it."""
from __future__ import annotations

import pytest

import ray_broker as rb
import ray_broker.aio as rba
from ray_broker.config import AUTH_TOKEN_ENV


@pytest.fixture(scope="module")
def guarded(ray_instance: None, tmp_path_factory: pytest.TempPathFactory):  # type: ignore[no-untyped-def]
    """Namespace "guarded" (2 partitions: the token is checked the same whatever their count), started
    with the token "s3cret"."""
    ns = rb.start("guarded", sku="premium", partitions=2, data_dir=str(tmp_path_factory.mktemp("guarded")),
                  auth_token="s3cret")
    yield ns
    rb.stop("guarded", delete_data=True)


def test_only_the_right_token_connects(guarded: rb.Namespace, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(AUTH_TOKEN_ENV, raising=False)
    with pytest.raises(rb.UnauthorizedError, match="requires an auth token"):
        rb.connect("guarded")
    with pytest.raises(rb.UnauthorizedError, match="not the one it was started with"):
        rb.connect("guarded", auth_token="guess")
    with pytest.raises(rb.UnauthorizedError):
        rb.start("guarded", auth_token="guess")
    ns = rb.connect("guarded", auth_token="s3cret")
    ns.create_queue("q")
    with ns.get_queue_sender("q") as sender:
        sender.send_messages(rb.Message("in"))
    monkeypatch.setenv(AUTH_TOKEN_ENV, "s3cret")
    with rb.connect("guarded").get_queue_receiver("q", max_wait_time=5) as receiver:
        [message] = receiver.receive_messages(1, max_wait_time=5)
        receiver.complete_message(message)
    assert message.body == b"in"


async def test_the_async_client_checks_the_token_too(guarded: rb.Namespace, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(AUTH_TOKEN_ENV, raising=False)
    with pytest.raises(rb.UnauthorizedError):
        await rba.connect("guarded", auth_token="guess")
    ns = await rba.connect("guarded", auth_token="s3cret")
    assert ns.name == "guarded"
