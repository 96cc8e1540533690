"""Email: see adapter.py for the data flow; imap-tools and aiosmtplib load only when the
platform starts."""

from botweave.adapter import Adapter, PlatformSpec

from .config import EmailConfig


def _create(config: EmailConfig) -> Adapter:
    # Deferred so `botweave --help`, `check` and the console never pay for the libraries' import.
    from .adapter import EmailAdapter

    return EmailAdapter(config)


platform = PlatformSpec("email", EmailConfig, _create)
