"""Build hook: ship the top-level static/, kernels/ and luts/ inside the wheel.

The repository layout keeps these folders at the top level (the browser loads them directly and
so does the Python peer). A wheel must carry them too, so build_py copies them into
``daisychain/_assets/`` at build time. An editable install finds them in the source tree instead
(see ``daisychain.assets``).
"""

import shutil
from pathlib import Path

from setuptools import setup
from setuptools.command.build_py import build_py

ASSET_DIRS = ("static", "kernels", "luts")


class BuildPyWithAssets(build_py):
    def run(self) -> None:
        super().run()
        root = Path(__file__).parent
        target = Path(self.build_lib) / "daisychain" / "_assets"
        # Start clean: a reused build/ folder must never ship a file the source no longer has.
        shutil.rmtree(target, ignore_errors=True)
        for name in ASSET_DIRS:
            src = root / name
            if src.is_dir():
                shutil.copytree(src, target / name, dirs_exist_ok=True)


setup(cmdclass={"build_py": BuildPyWithAssets})
