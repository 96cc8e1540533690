"""botweave push: tell a person, on their own channel, when something needs them.

`policy` decides (pure), `preferences` remembers what each person wants, `transports` deliver
(platform DM or signed webhook), and `notifier` ties them together with counting and digests.
"""

from botweave.push.config import (
    PreferenceConfig,
    PushConfig,
    RecipientConfig,
    WebhookSettings,
    parse_push_config,
    parse_quiet_hours,
)
from botweave.push.model import DM_TRANSPORT, PushMessage, Recipient
from botweave.push.notifier import (
    NotificationOutcome,
    Notifier,
    asks_question,
    digest_text,
    mention_triggers,
    mentioned_people,
)
from botweave.push.policy import (
    DEFAULT_PREFERENCE,
    PRIVATE_TEXT,
    DecisionReason,
    DetailLevel,
    NotificationCategory,
    NotificationDecision,
    NotificationPreference,
    evaluate,
    redact,
)
from botweave.push.preferences import (
    NotifyCommandResult,
    PreferenceStore,
    describe_preference,
    handle_notify_command,
)
from botweave.push.transports import (
    DELIVERY_ID_HEADER,
    SIGNATURE_HEADER,
    DeliveryResult,
    DirectMessageTransport,
    SendDirect,
    Transport,
    WebhookTransport,
    sign_body,
    verify_signature,
)

__all__ = [
    "DEFAULT_PREFERENCE",
    "DELIVERY_ID_HEADER",
    "DM_TRANSPORT",
    "PRIVATE_TEXT",
    "SIGNATURE_HEADER",
    "DecisionReason",
    "DeliveryResult",
    "DetailLevel",
    "DirectMessageTransport",
    "NotificationCategory",
    "NotificationDecision",
    "NotificationOutcome",
    "NotificationPreference",
    "Notifier",
    "NotifyCommandResult",
    "PreferenceConfig",
    "PreferenceStore",
    "PushConfig",
    "PushMessage",
    "Recipient",
    "RecipientConfig",
    "SendDirect",
    "Transport",
    "WebhookSettings",
    "WebhookTransport",
    "asks_question",
    "describe_preference",
    "digest_text",
    "evaluate",
    "handle_notify_command",
    "mention_triggers",
    "mentioned_people",
    "parse_push_config",
    "parse_quiet_hours",
    "redact",
    "sign_body",
    "verify_signature",
]
