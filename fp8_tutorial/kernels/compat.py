"""What differs between the Triton the book is executed with (3.6, ``requirements.txt``) and the
newer ones CI also tests (``requirements-newest.txt``), in one place: the kernels are one source
for both.
"""

import triton
from triton.experimental.gluon import language as gl

#: Triton's version, (major, minor).
TRITON = tuple(int(part) for part in triton.__version__.split(".")[:2])

#: A barrier over all the threads of a program: Gluon's ``thread_barrier`` in Triton 3.6, renamed
#: ``barrier`` (with a ``cluster`` switch, off by default) in later versions.
cta_barrier = gl.thread_barrier if hasattr(gl, "thread_barrier") else gl.barrier

#: Whether a plan may launch a compiled kernel through the C function beneath Triton's launcher,
#: with the argument layout ``host.Direct`` builds: that layout is Triton 3.6's (later versions
#: pass the arguments otherwise and describe TMA descriptors with more fields). Elsewhere a plan's
#: later calls go through Triton's own launch, as its first call does.
DIRECT_LAUNCH = TRITON == (3, 6)
