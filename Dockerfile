# botweave in a container: one image for every role (all, ingress, worker).
#   docker build -t botweave .
#   docker run --rm -v "$PWD/bot.yaml:/config/bot.yaml:ro" -e TELEGRAM_BOT_TOKEN botweave
# compose.yaml runs an ingress, two workers and Redis from this image.
FROM python:3.11-slim

ENV PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1

WORKDIR /src
COPY pyproject.toml README.md ./
COPY bots bots
COPY adapters adapters
COPY policies policies
COPY rooms rooms
COPY push push
COPY runtime runtime
RUN pip install . \
 && useradd --create-home --uid 10001 --shell /usr/sbin/nologin botweave

# Never root: the bot needs no privilege, and a compromised dependency gets none.
USER botweave
WORKDIR /home/botweave

# /metrics, /healthz and /readyz (see --ops-listen below).
EXPOSE 9464
# The slim image has no curl; Python's standard library asks /healthz instead.
HEALTHCHECK --interval=30s --timeout=5s --start-period=60s --retries=3 \
  CMD ["python", "-c", "import urllib.request; urllib.request.urlopen('http://127.0.0.1:9464/healthz', timeout=4)"]

ENTRYPOINT ["botweave"]
CMD ["run", "/config/bot.yaml", "--ops-listen", "0.0.0.0:9464", "--log-format", "json"]
