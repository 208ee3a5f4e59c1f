"""Shared fixtures, and the device the suite runs on.

The folders of tests/ mirror the packages (tests/agile/executor/ tests agile/executor/). They hold no
``__init__.py``: pytest puts each test file's folder, and this file's, on ``sys.path``, so the shared modules
beside this file (``helper_data``, ``imports``, ``productqa_slice``, ...) are imported by their plain names from
any folder, and every test file needs a name of its own across tests/.
"""

import os

# The suite's exact comparisons (brute force at 1e-4, resume = uninterrupted run, learned-cue thresholds) are set
# for fp32 on the CPU, where CI runs; on a GPU machine the code would pick bf16 on cuda. So the README's test
# command gives CI's results on any machine; HELPGATE_TEST_DEVICE=cuda runs the suite on the GPU instead (tests
# whose tolerances assume fp32 may then fail: RESULTS, "On a GPU").
if os.environ.get("HELPGATE_TEST_DEVICE", "cpu") == "cpu":
    os.environ["CUDA_VISIBLE_DEVICES"] = ""

# Under pytest-xdist each worker gets one core: two workers at default threads on 2 cores stall each other.
if os.environ.get("PYTEST_XDIST_WORKER"):
    os.environ.setdefault("OMP_NUM_THREADS", "1")

import pytest  # noqa: E402
import torch  # noqa: E402

if os.environ.get("PYTEST_XDIST_WORKER"):
    torch.set_num_threads(1)


@pytest.fixture(scope="module")
def one_torch_thread():
    """Tiny models gain nothing from threads; on a busy 2-core machine the threads mostly wait on
    each other (a 30x slow-down measured), so modules that use this run single-threaded and
    restore the setting after."""
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)
