#!/usr/bin/python3
# SPDX-License-Identifier: MIT
"""flags.py cflags|libs|suffix|version: how to build against this Python's torch (Debian's).

The flags are for a shell command line (make's recipes): the quoted defines
keep their inner double quotes once the shell has read them."""
import sys
import sysconfig

import torch
from torch.utils import cpp_extension

what = sys.argv[1] if len(sys.argv) > 1 else "cflags"
if what == "cflags":
    inc = cpp_extension.include_paths() + [sysconfig.get_paths()["include"]]
    defs = [f"-D_GLIBCXX_USE_CXX11_ABI={int(torch._C._GLIBCXX_USE_CXX11_ABI)}",
            f"'-DPYBIND11_COMPILER_TYPE=\"{torch._C._PYBIND11_COMPILER_TYPE}\"'",
            f"'-DPYBIND11_STDLIB=\"{torch._C._PYBIND11_STDLIB}\"'",
            f"'-DPYBIND11_BUILD_ABI=\"{torch._C._PYBIND11_BUILD_ABI}\"'",
            "-DTORCH_EXTENSION_NAME=_C", "-DTORCH_API_INCLUDE_EXTENSION_H"]
    print(" ".join([f"-isystem {i}" for i in inc] + defs))
elif what == "libs":
    libs = cpp_extension.library_paths()
    print(" ".join([f"-L{d}" for d in libs] + [f"-Wl,-rpath,{d}" for d in libs] +
                   ["-ltorch_python", "-ltorch", "-ltorch_cpu", "-lc10"]))
elif what == "suffix":
    print(sysconfig.get_config_var("EXT_SUFFIX"))
elif what == "version":
    print(torch.__version__)
