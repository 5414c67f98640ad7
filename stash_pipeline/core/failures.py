"""A failure's reason as a user sees it: without the server's paths, and its one line shown
before the log it ends (``rm show``, the viewer)."""

from __future__ import annotations

import re

# An absolute path, or a file:// URI, not part of a longer word, URL or Hugging Face id. A ":"
# before it does not protect it (``PATH=/a:/b``, ``dir:/srv/x``): URLs are kept because "//"
# never starts a match and their path parts follow a word character.
_PART = r"(?:/[^\s/'\"(),:;\[\]{}<>]+)+/?"
_SERVER_PATH = re.compile(rf"file://{_PART}|(?<![\w./~-]){_PART}")


def hide_server_paths(text: str) -> str:
    """``text`` with each absolute path cut to its last part (``.../worker.log``): what a failed
    model's ``error`` keeps of the worker log, whose lines name the job directory, STASH_HOME and
    the base model's directory. Applying it twice changes nothing."""
    return _SERVER_PATH.sub(lambda m: ".../" + m.group(0).rstrip("/").rsplit("/", 1)[-1], text)


def reason_line(error: str | None) -> str | None:
    """The last line of ``error`` that says something: the worker ends its log with
    ``job failed in phase <phase>: <Error>: <reason>``, and other failures are one line."""
    if not error:
        return None
    lines = [line.strip() for line in error.strip().splitlines() if line.strip()]
    return lines[-1] if lines else None
