"""Shared fixtures."""

import pytest
import torch


@pytest.fixture(scope="module")
def one_torch_thread():
    """Tiny models gain nothing from threads; on a busy 2-core machine the threads mostly wait on
    each other (a 30x slow-down measured), so modules that use this run single-threaded and
    restore the setting after."""
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)
