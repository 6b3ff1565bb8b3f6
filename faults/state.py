"""What a worker holds now, in a file of its own that the harness reads: whether it holds
a lock and has not written under it yet (so a nemesis can freeze a holder before its
writes), on which key, since when, in which mode. One JSON object, replaced whole."""

import json
import os
from dataclasses import asdict, dataclass
from typing import Optional

IDLE = "idle"
HOLDING = "holding"   # granted, not written under it yet
WRITING = "writing"   # granted, writing under it


@dataclass(frozen=True)
class HolderState:
    phase: str                       # IDLE, HOLDING or WRITING
    key: Optional[str] = None        # the lock held (HOLDING, WRITING)
    answered_at: float = 0.0         # when the grant was answered (monotonic seconds)
    mode: Optional[str] = None       # "plain", "session" or "shared"

    @property
    def holds_unwritten(self):
        """Whether it holds a lock as a writer and has not written under it yet."""
        return self.phase == HOLDING and self.mode != "shared"

    @property
    def holds(self):
        return self.phase in (HOLDING, WRITING)

    def write(self, path):
        with open(path + ".new", "w") as f:
            json.dump(asdict(self), f)
        os.replace(path + ".new", path)

    @staticmethod
    def read(path):
        """The state the file holds; None when there is none (yet)."""
        try:
            with open(path) as f:
                return HolderState(**json.load(f))
        except (OSError, ValueError, TypeError):
            return None
