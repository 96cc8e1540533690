"""What a feature costs a turn when nothing goes wrong: botweave's CPU per message with the
feature on, against the same bot with it off, in one run (bench/race.py's cpu case: Telegram,
zero model latency, each bot alone in its process, its CPU read from /proc).

    python3 bench/overhead.py --feature tracing [--chats 200] [--messages 5] [--repeat 3] [--model-processes 1]
    python3 bench/overhead.py --feature tracing --baseline 'PATH/TO/OTHER/botweave'
    python3 bench/overhead.py --noise

Features:

* tracing: `ops.tracing` exporting every turn's spans to an OTLP/HTTP receiver that answers
  (in the harness's process, so its work is charged to neither bot). Target: ≤ 1.15.

With `--baseline CMD`, what the feature costs when it is off: this tree's bot with the
feature off against the same bot run by CMD (a botweave from before the feature, e.g. main's
tree installed in a venv of its own). Target: ≤ 1.01.

With `--noise`, the same bot (feature off) against itself, run exactly as the comparisons are:
the spread of its ratios is what this machine's noise alone makes of a ratio (a shared
machine's can be larger than the feature's cost).

The two bots take turns going first; each measured run gets a process of its own.
"""

from __future__ import annotations

import argparse
import asyncio
import shlex
import shutil
import statistics
import sys
import tempfile
from dataclasses import replace
from pathlib import Path

BENCH = Path(__file__).resolve().parent
sys.path.insert(0, str(BENCH))
sys.path.insert(0, str(BENCH.parent))

import race  # noqa: E402

from tests.otlp_receiver import OtlpReceiver  # noqa: E402

TARGETS = {"tracing": 1.15}
#: The feature switched off, against a botweave without it.
OFF_TARGET = 1.01


async def overlay_for(feature: str) -> tuple[dict[str, object], OtlpReceiver | None]:
    if feature == "tracing":
        receiver = await OtlpReceiver().start()
        return {"ops": {"tracing": {"endpoint": receiver.endpoint, "service_name": "race"}}}, receiver
    raise SystemExit(f"unknown feature {feature!r}; features: {', '.join(TARGETS)}")


async def main(args: argparse.Namespace) -> int:
    logs = Path(tempfile.mkdtemp(prefix="botweave-overhead-"))
    base = race.Settings(
        chats=args.chats, messages=args.messages, throughput_messages=8, latency=0.0, repeat=args.repeat,
        telegram_rps=10000.0, idle_timeout=60.0, botweave=race.botweave_command(None), logs=logs,
        model_processes=args.model_processes,
    )
    target: float | None
    if args.noise:
        receiver = None
        first, second = "off", "again"
        variants = {"off": base, "again": base}
        target = None
    elif args.baseline:
        receiver = None
        first, second = "before", "off"
        variants = {"before": replace(base, botweave=shlex.split(args.baseline)), "off": base}
        target = OFF_TARGET
    else:
        overlay, receiver = await overlay_for(args.feature)
        first, second = "off", "on"
        variants = {"off": base, "on": replace(base, overlay=overlay)}
        target = TARGETS[args.feature]
    model = race.ModelServer()
    await model.start()
    cpu: dict[str, list[float]] = {first: [], second: []}
    try:
        for rep in range(args.repeat):
            for name in ((first, second) if rep % 2 == 0 else (second, first)):
                contestant = await race.spawn("telegram", "botweave", variants[name], model)
                try:
                    await race.ready([contestant])
                    result = await race.measure(contestant, "cpu", rep, model, variants[name])
                finally:
                    await race.stop_all([contestant])
                per_message = result.bot_cpu / max(result.answered, 1) * 1000
                cpu[name].append(per_message)
                print(f"  {args.feature} {name:6} run {rep + 1}: {per_message:.2f} ms CPU per message "
                      f"({result.answered} answered, {result.missing} missing)", flush=True)
    finally:
        await model.stop()
        if receiver is not None:
            print(f"  the receiver got {len(receiver.spans)} spans in {receiver.requests} exports", flush=True)
            await receiver.stop()
        shutil.rmtree(logs, ignore_errors=True)
    ratios = [b / a for b, a in zip(cpu[second], cpu[first])]
    median = statistics.median(ratios)
    print(f"{args.feature}: CPU per message {second} / {first} = {median:.3f} "
          f"(runs: {', '.join(f'{r:.3f}' for r in ratios)}; spread {min(ratios):.3f}-{max(ratios):.3f}; "
          f"{'no target: noise alone' if target is None else f'target ≤ {target}'})")
    return 0 if target is None or median <= target else 1


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--feature", choices=sorted(TARGETS), default="tracing")
    parser.add_argument("--chats", type=int, default=200)
    parser.add_argument("--messages", type=int, default=5)
    parser.add_argument("--repeat", type=int, default=1)
    parser.add_argument("--model-processes", type=int, default=1, help="models.processes of both bots (as race.py)")
    parser.add_argument("--noise", action="store_true", help="the bot with the feature off against itself")
    parser.add_argument("--baseline", metavar="CMD",
                        help="compare the feature off with this botweave command (one without the feature)")
    raise SystemExit(asyncio.run(main(parser.parse_args())))
