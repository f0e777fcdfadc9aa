"""What goes wrong talking to the API server: ApiException for an error status (as the kubernetes library's own
exception carries it), Unreachable when the server was not reached, and the words an operator reads for either
(`words`, `one_line`). It makes no call; every module that talks to the API server catches these."""

from __future__ import annotations

import errno
import http.client
import socket
import ssl

ALLOW = "allow the API server with IPAddressAllow= in a drop-in, see docs/kubernetes.md"  # through the unit's firewall


class ApiException(Exception):
    """The API server answered with an error status (or a watch ended with an ERROR event)."""

    def __init__(self, status: int, reason: str, body: bytes = b"") -> None:
        super().__init__(f"({status}) {reason}")
        self.status, self.reason, self.body = status, reason, body


class Unreachable(OSError):
    """The API server could not be reached or talked to; the message says what happened in an operator's words
    (the underlying error is its __cause__, and logged at debug level)."""


def words(e: BaseException, url: str, timeout: float | None) -> str:
    """What a failed connection to the API server at `url` means, in an operator's words (no library internals:
    urllib3's retry wrappers are unwrapped to their reason)."""
    reason = getattr(e, "reason", None)
    if isinstance(reason, BaseException) and not isinstance(e, OSError | ssl.SSLError):
        return words(reason, url, timeout)  # urllib3's MaxRetryError and the like, from the library's transport
    if isinstance(e.__cause__, OSError) and type(e).__module__.startswith("urllib3."):
        return words(e.__cause__, url, timeout)  # its NewConnectionError, raised from the socket's own error
    if isinstance(e, ssl.SSLCertVerificationError):
        return (
            f"TLS: the certificate of the API server at {url} is not trusted ({e.verify_message}): check the "
            "kubeconfig's certificate-authority(-data)"
        )
    if isinstance(e, ssl.SSLError):
        return f"TLS failure talking to the API server at {url}: {e.reason or e}"
    if isinstance(e, TimeoutError):
        after = f" within {timeout:g} s" if timeout else ""
        return f"the API server at {url} did not answer{after}"
    if isinstance(e, ConnectionRefusedError):
        return f"the API server at {url} refused the connection: is it running, and is the kubeconfig's address right?"
    if isinstance(e, socket.gaierror):
        return f"cannot resolve the API server's host of {url}: {e.strerror}"
    if isinstance(e, OSError) and e.errno == errno.EPERM:
        return f"connecting to the API server at {url} is not permitted: the netcomp unit denies IP traffic ({ALLOW})"
    if isinstance(e, OSError):
        return f"the API server at {url} cannot be reached: {e.strerror or e}"
    if isinstance(e, http.client.HTTPException):
        return f"the API server at {url} broke off its answer ({type(e).__name__})"
    return f"the API server at {url} cannot be reached: {type(e).__name__}: {e}"


def one_line(e: Exception) -> str:
    """A failed API call in a line, with what to do when it is the unit's own IP firewall that refused: systemd's
    IPAddressDeny= drops packets in a cgroup BPF program, which the connect() sees as EPERM."""
    if isinstance(e, Unreachable):  # worded by the client, which knows where it was going
        return str(e)
    if isinstance(e, ApiException):
        return f"{e.status} {e.reason}"
    text = f"{type(e).__name__}: {e}"
    if "Operation not permitted" in text or "[Errno 1]" in text:
        text += f" (the netcomp unit denies IP traffic: {ALLOW})"
    return text
