"""WhatsApp (the Cloud API): see adapter.py for the data flow; nothing loads until the platform starts."""

from botweave.adapter import Adapter, PlatformSpec

from .config import WhatsAppConfig


def _create(config: WhatsAppConfig) -> Adapter:
    # Deferred so `botweave --help`, `check` and the other platforms never pay for it.
    from .adapter import WhatsAppAdapter

    return WhatsAppAdapter(config)


platform = PlatformSpec("whatsapp", WhatsAppConfig, _create)
