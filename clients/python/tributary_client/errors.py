"""The exceptions of the Tributary client: one for every refused or failed call.

A gRPC error becomes a TributaryError that keeps the status code and the server's own
message (which names the field and the value, docs/api.md "Status codes"), plus the
name of the call, so `except TributaryError as e: if e.code == grpc.StatusCode.NOT_FOUND`
works without touching gRPC's own exception types.
"""

import grpc


class TributaryError(Exception):
    """A call to the cluster failed.

    Attributes:
      code: the grpc.StatusCode the server (or gRPC itself) answered, e.g.
        grpc.StatusCode.INVALID_ARGUMENT for a bad job spec, UNAUTHENTICATED without the
        control token, UNAVAILABLE when the coordinator cannot be reached.
      details: the server's message, e.g. "spec.global_batch_size: must be > 0, got 0".
      rpc: the call that failed, e.g. "SubmitJob" or "Pull from shard 1 at 10.0.0.7:50061".
    """

    def __init__(self, code, details, rpc=""):
        """Makes the error from a grpc.StatusCode, the message and the call's name."""
        self.code = code
        self.details = details or ""
        self.rpc = rpc
        super().__init__(str(self))

    def __str__(self):
        """"RPC: CODE: message", the form the tributary CLI prints."""
        prefix = self.rpc + ": " if self.rpc else ""
        return "%s%s: %s" % (prefix, self.code.name, self.details)

    def __reduce__(self):
        """Pickles by value (errors cross process boundaries in multiprocessing)."""
        return (self.__class__, (self.code, self.details, self.rpc))


class WaitTimeoutError(TributaryError, TimeoutError):
    """A wait ended before the job did. `job` is the job as last seen (a v1 Job)."""

    def __init__(self, details, job=None, rpc="wait_for_job"):
        """Makes the error; code is DEADLINE_EXCEEDED."""
        self.job = job
        super().__init__(grpc.StatusCode.DEADLINE_EXCEEDED, details, rpc)

    def __reduce__(self):
        """Pickles by value."""
        return (self.__class__, (self.details, self.job, self.rpc))


class JobFailedError(TributaryError):
    """wait_for_job(check=True): the job ended FAILED or STOPPED.

    `job` is the final v1 Job; `details` is its state and state_reason (why it failed,
    as the coordinator recorded it). The code is ABORTED.
    """

    def __init__(self, details, job=None, rpc="wait_for_job"):
        """Makes the error; code is ABORTED."""
        self.job = job
        super().__init__(grpc.StatusCode.ABORTED, details, rpc)

    def __reduce__(self):
        """Pickles by value."""
        return (self.__class__, (self.details, self.job, self.rpc))


def from_rpc_error(error, rpc):
    """The TributaryError for a grpc.RpcError raised by the call named `rpc`.

    Anything else (a bug on this side) is returned unchanged, so that
    `raise from_rpc_error(e, name) from e` never hides it.
    """
    if isinstance(error, grpc.RpcError) and hasattr(error, "code"):
        code = error.code()
        details = error.details() if hasattr(error, "details") else str(error)
        if not isinstance(code, grpc.StatusCode):
            code = grpc.StatusCode.UNKNOWN
        return TributaryError(code, details, rpc)
    return error
