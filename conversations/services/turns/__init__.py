"""The chat turn: send a message, regenerate an answer, stop one (DESIGN §4).

A turn builds its prompt (memory, retrieval: I/O, no lock held), then starts the
generation through the gateway's one lifecycle
(:func:`gateway.generations.generation_start`): admission reserves the tokens, a short
transaction stores the user message and an answer in ``streaming`` status (the
conversation row locked only for that), and the job is submitted after commit.

- :mod:`.run`: the services (:func:`turn_start`, :func:`turn_regenerate`,
  :func:`turn_continue`, :func:`turn_stop`) and :func:`turn_run`, which takes a turn through its steps;
- :mod:`.request`: what a turn answers (:class:`TurnRequest`) and produced (:class:`Turn`);
- :mod:`.prompt`: build the prompt and the gateway's generation request;
- :mod:`.rows`: store the messages and the conversation's leaf.
"""

from conversations.services.turns.request import Turn, TurnRequest
from conversations.services.turns.rows import BUSY_MESSAGE, idle_check
from conversations.services.turns.run import (
    turn_continue,
    turn_regenerate,
    turn_run,
    turn_start,
    turn_stop,
)

__all__ = [
    "BUSY_MESSAGE",
    "Turn",
    "TurnRequest",
    "idle_check",
    "turn_continue",
    "turn_regenerate",
    "turn_run",
    "turn_start",
    "turn_stop",
]
