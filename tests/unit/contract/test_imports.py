"""The contract is the ground floor: importing it loads no sealbench package but crypto."""

from __future__ import annotations

import subprocess
import sys


def test_the_contract_imports_only_crypto() -> None:
    code = (
        "import sys, pkgutil, importlib, sealbench.contract as c\n"
        "for m in pkgutil.iter_modules(c.__path__):\n"
        "    importlib.import_module(f'sealbench.contract.{m.name}')\n"
        "print(sorted({n.split('.')[1] for n in sys.modules if n.startswith('sealbench.')}))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], check=True, capture_output=True,
                         text=True).stdout.strip()
    assert out == "['contract', 'crypto']"
