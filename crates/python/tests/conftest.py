import os
import tempfile

import pytest


@pytest.fixture
def pooldir():
    """A scratch directory, on tmpfs when there is one (durable writes msync)."""
    base = "/dev/shm" if os.path.isdir("/dev/shm") else None
    with tempfile.TemporaryDirectory(dir=base, prefix="ferrite-py-") as d:
        yield d


@pytest.fixture(params=["inp", "cow", "lsm"])
def engine(request):
    return request.param
