"""The one exception family of mlms.

Every failure a user can cause or meet is an ``MlmsError`` whose message is one line that names
the bad value and what was expected. Adapters (etcd, S3, gRPC, frameworks) translate their own
exceptions into these with ``raise ... from exc``; nothing above them sees a library exception.

    MlmsError
    ├── InvalidArgument        a malformed request value (batch size, input, level, ...)
    ├── NotFound
    │   ├── UnknownModel       not in the zoo (names the close matches)
    │   ├── UnknownEvaluation  no record with that id
    │   ├── UnknownDataset     no data set of that name (and version) in the store
    │   └── HardwareNotFound   no device matches the --hw alias (names what exists)
    ├── AlreadyExists          a name already taken: a model's or a data set's (``--replace``)
    ├── UnsupportedFramework   framework unknown, not installed, or not supported by the model
    ├── LibraryFailure         a framework or library raised while building, loading or running
    │                          a model (``mlms.library_errors``: the library, its version, why)
    ├── ManifestError          a zoo manifest that does not validate (file and field)
    ├── AssetError
    │   └── ChecksumMismatch   stored or downloaded bytes differ from the recorded sha256
    ├── StoreError             the object store failed or lacks a key
    ├── EvaluationInFlight     no record yet: a server is still dispatching the evaluation
    ├── Unavailable            a server, agent or registry cannot be reached
    │   └── AccessRefused      etcd answered but refused our credentials or their permissions
    ├── RankFailed             a rank of a split model died mid-run (names the rank and device)
    ├── Unauthenticated        no bearer token, or one that is unknown or revoked
    └── PermissionDenied       a valid token without the role the method needs
"""

from __future__ import annotations


class MlmsError(Exception):
    """Base of every error mlms raises on purpose."""


class InvalidArgument(MlmsError):
    pass


class NotFound(MlmsError):
    pass


class UnknownModel(NotFound):
    pass


class UnknownEvaluation(NotFound):
    pass


class HardwareNotFound(NotFound):
    pass


class UnknownDataset(NotFound):
    pass


class AlreadyExists(MlmsError):
    pass


class UnsupportedFramework(MlmsError):
    pass


class LibraryFailure(MlmsError):
    """``details`` is the traceback, for the log of the process that reports the error (it
    crosses a process boundary with the error, never a wire)."""

    def __init__(self, message: str, details: str = "") -> None:
        super().__init__(message)
        self.details = details


class ManifestError(MlmsError):
    pass


class AssetError(MlmsError):
    pass


class ChecksumMismatch(AssetError):
    pass


class StoreError(MlmsError):
    pass


class NotMeasurable(MlmsError):
    """What was asked for cannot be measured on the device (an energy counter it lacks)."""


class EvaluationInFlight(MlmsError):
    pass


class Unavailable(MlmsError):
    pass


class Overloaded(MlmsError):
    """Refused for now, not for what was asked: the server holds as many calls as it takes,
    or the caller has spent its quota. ``retry_after``: the seconds the server said to wait
    (gRPC's ``grpc-retry-pushback-ms``), None when it said nothing."""

    def __init__(self, message: str, retry_after: float | None = None) -> None:
        super().__init__(message)
        self.retry_after = retry_after


class RankFailed(MlmsError):
    """A rank of a model split over several processes died mid-run: the evaluation is aborted
    (nothing stored) and may succeed if asked again."""


class AccessRefused(Unavailable):
    """Not the caller's fault but the process's own configuration (user, password, role), so
    a gRPC caller sees the backend as unavailable, never as its own PERMISSION_DENIED."""


class Unauthenticated(MlmsError):
    pass


class PermissionDenied(MlmsError):
    pass


#: What each error is on the wire: its gRPC status code (by name: this module imports nothing)
#: and its HTTP status (the UI and its API). Most specific first: the first class an error is
#: an instance of gives both; an error of none of them is INTERNAL / 500.
STATUS: list[tuple[type[MlmsError], str, int]] = [
    (InvalidArgument, "INVALID_ARGUMENT", 400),
    (NotFound, "NOT_FOUND", 404),
    (AlreadyExists, "ALREADY_EXISTS", 409),
    (UnsupportedFramework, "FAILED_PRECONDITION", 400),
    (EvaluationInFlight, "FAILED_PRECONDITION", 409),
    (NotMeasurable, "FAILED_PRECONDITION", 400),
    # Not the request's fault: the installed libraries cannot do it until they are changed.
    (LibraryFailure, "FAILED_PRECONDITION", 400),
    (Unavailable, "UNAVAILABLE", 503),
    (Overloaded, "RESOURCE_EXHAUSTED", 429),
    (RankFailed, "ABORTED", 409),
    (ManifestError, "FAILED_PRECONDITION", 400),
    (AssetError, "DATA_LOSS", 502),
    (StoreError, "UNAVAILABLE", 502),
    (Unauthenticated, "UNAUTHENTICATED", 401),
    (PermissionDenied, "PERMISSION_DENIED", 403),
]
