"""Delivery under faults, repeated: a worker killed with SIGKILL, or Redis paused, mid-load.

Each run starts a private redis-server (one for all runs), a platform emulator, an ingress
and two `botweave run --role worker` processes, sends 600 messages over 60 chats and, once a
quarter are answered, kills a worker (or pauses Redis with CLIENT PAUSE). Where the kill lands
differs every time, so one run proves little: this prints every run and the spread.

    python3 bench/crash.py [--runs N] [--platforms telegram,discord,slack,whatsapp,teams] [--faults kill,pause]

Per run: lost (never answered), duplicated (answered twice), in flight (sends the killed worker
had announced and not confirmed: the most Telegram and WhatsApp may show twice), takeover (longest wait of
a conversation for its next answer after the fault), stalled (conversations that waited more
than 3 s, of those with messages still to answer), broken histories, model requests that held
a turn twice, store-outage warnings and tracebacks in the processes' logs.
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import shutil
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench.scale import start_redis  # noqa: E402
from tests import crashlab  # noqa: E402


async def main(runs: int, platforms: list[str], faults: list[str], keep: bool) -> int:
    logging.getLogger("aiohttp.server").setLevel(logging.CRITICAL)  # killed clients are the point here
    logging.getLogger("aiohttp.access").setLevel(logging.CRITICAL)
    workdir = Path(tempfile.mkdtemp(prefix="botweave-crash-"))
    redis, redis_url = start_redis(workdir)
    failures = 0
    try:
        for fault in faults:
            for platform in platforms:
                results = []
                for n in range(1, runs + 1):
                    result = await crashlab.run(platform, fault, redis_url, workdir / f"{platform}-{fault}-{n}")
                    results.append(result)
                    print(f"run {n:2}  {result.line()}", flush=True)
                    duplicates = sum(k - 1 for k in result.duplicated.values())
                    no_key = platform in ("telegram", "whatsapp", "teams")  # at least once: a send in flight may repeat
                    allowed = result.in_flight if no_key and fault == "kill" else 0
                    if result.lost or duplicates > allowed or result.history_problems or result.model_problems:
                        failures += 1
                print(f"{platform} {fault}, {runs} runs: {crashlab.summary(results)}\n", flush=True)
    finally:
        redis.terminate()
        redis.wait(timeout=10)
        if keep:
            print(f"logs kept in {workdir}")
        else:
            shutil.rmtree(workdir, ignore_errors=True)
    print(f"runs breaking a guarantee: {failures}")
    return 1 if failures else 0


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--platforms", default="telegram,discord,slack,whatsapp,teams")
    parser.add_argument("--faults", default="kill,pause")
    parser.add_argument("--keep-logs", action="store_true", help="keep every run's process logs")
    args = parser.parse_args()
    sys.exit(
        asyncio.run(main(args.runs, args.platforms.split(","), args.faults.split(","), args.keep_logs))
    )
