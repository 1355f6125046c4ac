"""A read that concurrent callers share, never older than the call that asks for it.

Every ListEvaluations reads the index's generation (a database round trip) to know whether the
page it keeps is still the page. Here each call gets the result of a read that began after the
call did, so a record indexed before the call is listed by it; the calls that arrive while one
read runs wait for the next and all share it, so under load the database is read one time after
another (one read at a time), not once a call.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Generic, TypeVar

T = TypeVar("T")


class SharedRead(Generic[T]):
    def __init__(self, read: Callable[[], T]) -> None:
        self._read = read
        self._changed = threading.Condition()
        self._started = 0  # reads begun so far; the n-th has number n
        self._reading = False
        self._done = 0  # the number of the last read that ended
        self._result: T | None = None
        self._error: BaseException | None = None

    def get(self) -> T:
        """The result of a read that began after this call (its error, raised here)."""
        with self._changed:
            wanted = self._started + 1  # one running now began before this call
            while self._done < wanted:
                if self._reading:
                    self._changed.wait()
                    continue
                self._started += 1
                self._reading = True
                number = self._started
                self._changed.release()
                try:
                    result, error = self._read(), None
                except Exception as exc:  # handed to every caller waiting for this read
                    result, error = None, exc
                finally:
                    self._changed.acquire()
                    self._reading = False
                self._done, self._result, self._error = number, result, error
                self._changed.notify_all()
            if self._error is not None:
                raise self._error
            return self._result  # type: ignore[return-value]
