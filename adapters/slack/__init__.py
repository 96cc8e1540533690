"""Slack: slack-bolt's AsyncApp over Socket Mode (default) or the HTTP Events API."""

from .adapter import SlackAdapter

__all__ = ["SlackAdapter"]
