"""Test-session setup.

Kernels in this process run under the Triton interpreter, which Triton reads when it is first
imported, so it is switched on here, before any test module imports triton. Everything that
must compile or launch for real (doit runs, compile workers, GPU checks) runs in subprocesses
that remove it.
"""
import os

os.environ.setdefault("TRITON_INTERPRET", "1")
