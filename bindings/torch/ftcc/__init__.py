# SPDX-License-Identifier: MIT
"""ftcc from Python. `import ftcc.torch` registers the "ftcc" torch.distributed backend."""
