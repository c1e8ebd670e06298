"""The bottom layer: the error tree, atomic files and locks, config rules, the command line
(parser, numeric flags, device, levels) and the local / Ray job pool. No model or task code."""

import os as _os

# torch.cuda.is_available() then asks NVML instead of initialising the CUDA driver, so that a
# process of the suite may ask and still fork jobs that use the GPU (seqprobe.device). torch
# reads the variable at each call; every child inherits it.
_os.environ.setdefault("PYTORCH_NVML_BASED_CUDA_CHECK", "1")
