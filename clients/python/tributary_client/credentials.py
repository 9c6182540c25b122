"""The two credentials a user's calls carry (docs/security.md "Credentials").

- The control token (the coordinator's --control_token_file) goes as
  `authorization: Bearer <token>` on the user's control calls: SubmitJob, UploadModel,
  PauseJob, ResumeJob, StopJob.
- The cluster credential of a role, `<role> <hex HMAC-SHA256(secret, "tributary-role:<role>")>`
  made from the cluster secret (every process's --cluster_token_file), goes as
  `x-tributary-auth` on every call. Reads of the parameter servers (Pull) and of model
  files (FetchModel) need the operator's; `tributary auth-header` prints the same value.
"""

import hashlib
import hmac

# What the servers accept (common/cluster_auth.h): checked here too, so that a wrong
# file is named before any call.
MIN_SECRET_BYTES = 16
MAX_SECRET_BYTES = 4096

ROLES = ("operator", "worker", "parameter_server", "coordinator")

# Metadata keys (common/cluster_auth.h, services/coordinator/control_token.cc).
CLUSTER_AUTH_METADATA = "x-tributary-auth"
AUTHORIZATION_METADATA = "authorization"

# The bytes the servers strip around a secret or a token they read from a file
# (absl::StripAsciiWhitespace).
_ASCII_WHITESPACE = b" \t\n\v\f\r"


def read_cluster_secret(path):
    """The cluster secret in the file at `path`, as the servers read it.

    Surrounding ASCII whitespace is dropped; the rest must be 16-4096 bytes. Raises
    OSError when the file cannot be read and ValueError (naming the path, never the
    contents) when the secret has the wrong length.
    """
    with open(path, "rb") as f:
        text = f.read(MAX_SECRET_BYTES + 2)
    secret = text.strip(_ASCII_WHITESPACE)
    if not MIN_SECRET_BYTES <= len(secret) <= MAX_SECRET_BYTES:
        raise ValueError(
            "cluster_token_file=%s: the cluster secret has %d bytes; it needs %d to %d"
            % (path, len(secret), MIN_SECRET_BYTES, MAX_SECRET_BYTES))
    return secret


def role_credential(secret, role="operator"):
    """The x-tributary-auth value of `role` for the cluster secret `secret` (bytes or str).

    The same value `tributary auth-header --cluster_token_file=F --role=ROLE` prints.
    Users act as "operator"; the other roles are the cluster's own components.
    """
    if role not in ROLES:
        raise ValueError("role=%r: not one of %s" % (role, ", ".join(ROLES)))
    if isinstance(secret, str):
        secret = secret.encode()
    if not MIN_SECRET_BYTES <= len(secret) <= MAX_SECRET_BYTES:
        raise ValueError("the cluster secret has %d bytes; it needs %d to %d"
                         % (len(secret), MIN_SECRET_BYTES, MAX_SECRET_BYTES))
    mac = hmac.new(secret, ("tributary-role:" + role).encode(), hashlib.sha256).hexdigest()
    return role + " " + mac


def read_control_token(path):
    """The control token in the file at `path`, as the coordinator reads it.

    Surrounding ASCII whitespace is dropped; ValueError when nothing is left, OSError
    when the file cannot be read.
    """
    with open(path, "rb") as f:
        token = f.read().strip(_ASCII_WHITESPACE)
    if not token:
        raise ValueError("control_token_file=%s: the file is empty" % path)
    return token.decode("latin-1")


def check_header_value(name, value):
    """Raises ValueError when `value` cannot travel as gRPC metadata (a str of
    printable ASCII, as HTTP/2 header values must be)."""
    if not isinstance(value, str):
        raise TypeError("%s must be a str, got %s" % (name, type(value).__name__))
    if not value or any(not 0x20 <= ord(c) <= 0x7e for c in value):
        raise ValueError("%s must be non-empty printable ASCII" % name)
