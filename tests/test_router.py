from botweave.config import RouteConfig
from botweave.conversations import conversation_key
from botweave.router import Router, Target

from tests.support import message


def routes(*specs):
    return [RouteConfig.model_validate(s) for s in specs]


def test_more_specific_match_wins_whatever_the_order():
    router = Router(
        routes(
            {"match": {}, "agent": "default"},
            {"match": {"platform": "test"}, "agent": "platform"},
            {"match": {"chat_type": "group"}, "agent": "groups"},
            {"match": {"user_id": "u1"}, "agent": "user"},
            {"match": {"chat_id": "c1"}, "agent": "chat"},
            {"match": {"chat_id": "c1", "thread_id": "t1"}, "agent": "thread"},
        ),
        default_agent="unused",
    )
    resolve = lambda **kw: router.resolve(message("x", **kw)).name  # noqa: E731
    assert resolve(chat_id="c1", thread_id="t1", channel_type="group") == "thread"
    assert resolve(chat_id="c1", channel_type="group") == "chat"
    assert resolve(chat_id="c2", user_id="u1", channel_type="group") == "user"
    assert resolve(chat_id="c2", user_id="u2", channel_type="group") == "groups"
    assert resolve(chat_id="c2", user_id="u2") == "platform"
    assert resolve(chat_id="c2", user_id="u2", platform="other") == "default"


def test_ties_go_to_the_first_listed():
    router = Router(
        routes({"match": {"platform": "test"}, "agent": "first"}, {"match": {"platform": "test"}, "agent": "second"}),
        default_agent=None,
    )
    assert router.resolve(message("x")) == Target("agent", "first")


def test_unmatched_message_is_unroutable_when_routes_exist():
    router = Router(routes({"match": {"platform": "slack"}, "agent": "a"}), default_agent="a")
    assert router.resolve(message("x")) is None


def test_without_routes_the_first_agent_answers_everything():
    assert Router([], default_agent="a").resolve(message("x")) == Target("agent", "a")


def test_conversation_keys():
    assert conversation_key(message("x", chat_id="c", channel_type="group")) == "test:c"
    assert conversation_key(message("x", chat_id="c", channel_type="group", thread_id="t")) == "test:c:t"
    assert conversation_key(message("x", chat_id="dm-chan", user_id="u9")) == "test:dm:u9"
