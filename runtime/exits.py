"""How a bot process ends, as its exit code; a module of its own (no imports) so the command
line can name them without loading the runtime.

A clean stop; an enabled platform that never came up or died; a configuration that cannot
run; a store that cannot be reached at start. The watchdogs add EXIT_STARTUP (4: not
serving within `ops.startup_timeout_seconds`) and EXIT_STALLED (5: the event loop stalled
for twice `ops.loop_stall_seconds`).
"""

EXIT_OK, EXIT_PLATFORM, EXIT_CONFIG, EXIT_STORE = 0, 1, 2, 3
