"""The shim's view of a client's lines: lazyd/linepeek.py, whose rule for a message the daemon's hand-off ledger applies to the relay's parse."""

from lazyd.linepeek import BIG_LINE_BYTES as BIG_LINE_BYTES
from lazyd.linepeek import LineInfo as LineInfo
from lazyd.linepeek import error_line as error_line
from lazyd.linepeek import id_key as id_key
from lazyd.linepeek import inspect_line as inspect_line
from lazyd.linepeek import top_level_fields as top_level_fields
