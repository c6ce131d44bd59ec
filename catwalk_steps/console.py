"""Lines the user sees on the terminal at `tango run`'s default log level.

Tango shows its own progress ("Starting step ...") through its CLI logger, whatever the log
level; ordinary `INFO` records appear only with `--log-level info`. A few of ours belong beside
Tango's: where a step keeps its checkpoints, which checkpoint a run resumed from. In a worker
process the CLI logger sends them to `tango run`'s log server like every other record; outside
`tango run` (tests, notebooks) they go to the module's own logger.
"""

from __future__ import annotations

import logging


def announce(logger: logging.Logger, message: str, *args: object) -> None:
    """`message % args` on the terminal at the default log level (and in the run's log)."""
    from tango.common.logging import cli_logger

    if cli_logger.disabled or not (cli_logger.handlers or cli_logger.propagate):
        logger.info(message, *args)
    else:
        cli_logger.info(message, *args)
