"""Every CNI error code netcomp answers lives here, as libcni keeps its own in pkg/types/types.go: the spec's
(1-99) and netcomp's own (100 and up). tests/unit/test_shim.py checks the shim's copies against these."""

E_INCOMPATIBLE = 1  # incompatible CNI version
E_UNKNOWN_CONTAINER = 3  # the container is unknown or does not exist
E_INVALID_ENV = 4  # invalid necessary environment variables (CNI_COMMAND, CNI_CONTAINERID, CNI_NETNS, CNI_IFNAME)
E_IO = 5  # I/O failure (the node's: the cache, a host link)
E_DECODE = 6  # failed to decode content (not JSON, not HTTP, no Content-Length)
E_INVALID_CONFIG = 7  # invalid network configuration
E_INVALID_NETNS = 8  # the network namespace is invalid or gone (libcni's ErrInvalidNetNS; cleanup still needed)
E_TRY_LATER = 11  # try again later
E_NOT_AVAILABLE = 50  # STATUS: the plugin is not available
E_PEER = 100  # netcomp: the peer's uid may not use the socket
E_TOO_LARGE = 101  # netcomp: the request is larger than maxRequestBytes
E_OTHER = 999  # anything else: a delegate that did not answer in CNI's shape, or a bug in netcomp
