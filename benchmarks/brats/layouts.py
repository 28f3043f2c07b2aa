"""Raw BraTS folder layouts a hospital may prepare from, and how each maps onto the contract.

Two releases are read (:data:`LAYOUTS`):

* **BraTS 2023** (``brats2023``): ``BraTS-GLI-XXXXX-YYY/BraTS-GLI-XXXXX-YYY-{t1n,t1c,t2w,t2f,
  seg}.nii.gz``, labels NETC=1, SNFH=2, ET=3. Names are the contract's own.
* **BraTS 2021** (``brats2021``): ``BraTS2021_XXXXX/BraTS2021_XXXXX_{t1,t1ce,t2,flair,
  seg}.nii.gz``, labels NCR=1, ED=2, ET=4. Modalities are renamed t1→t1n, t1ce→t1c, t2→t2w,
  flair→t2f; labels are carried through their tissue (class index) into the contract's
  convention (4→3 for the 2023 one); the case becomes ``BraTS-GLI-XXXXX-000``, the id the
  BraTS 2023 GLI release gives the same patient (it grew out of the 2021 cohort).

A raw folder holds one release: case folders of both layouts in one folder are refused as a
whole (:class:`MixedLayoutsError`, nothing is prepared), because the two releases share
patients (``BraTS2021_00000`` is ``BraTS-GLI-00000-000``), so a mixed folder could count a
patient twice or keep one release's file under the other's id. Prepare each release into its own
dataset. A folder matching neither layout is rejected on its own, with a reason.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

from .contract import BRATS2021_LABELS, BRATS2023_LABELS, BratsContract, LabelMap
from .errors import PreparationError

__all__ = [
    "BRATS2021_LAYOUT",
    "BRATS2023_LAYOUT",
    "LAYOUTS",
    "MixedLayoutsError",
    "RawLayout",
    "folder_layout",
    "layout_of",
    "native_layout",
]


@dataclass(frozen=True)
class RawLayout:
    """One release's raw naming: case folder names, file names per part, label convention.

    ``parts`` maps each raw part name to the contract's name (modalities, then ``seg``)."""

    name: str
    title: str
    folder_pattern: str
    separator: str
    parts: dict[str, str]
    labels: LabelMap
    #: How a raw case id becomes the contract's case id (``None``: unchanged).
    case_id_template: str | None = None

    def matches(self, folder: str) -> bool:
        """Whether ``folder`` is a case folder name in this layout."""
        return re.fullmatch(self.folder_pattern, folder) is not None

    def case_id(self, folder: str) -> str:
        """The contract's id of the case stored in ``folder``."""
        match = re.fullmatch(self.folder_pattern, folder)
        if match is None:
            raise ValueError(f"{folder!r} is not a {self.title} case folder")
        if self.case_id_template is None:
            return folder
        return self.case_id_template.format(**match.groupdict())

    def file_part(self, folder: str, file_name: str, suffix: str) -> str | None:
        """The contract part stored in ``file_name`` inside ``folder``, or None if the name is
        not ``<folder><separator><raw part><suffix>``."""
        prefix = folder + self.separator
        if not file_name.startswith(prefix) or not file_name.endswith(suffix):
            return None
        return self.parts.get(file_name[len(prefix):-len(suffix)])

    def expected_files(self, folder: str, suffix: str) -> tuple[str, ...]:
        """Every file name a labelled case folder of this layout holds."""
        return tuple(f"{folder}{self.separator}{raw}{suffix}" for raw in self.parts)


BRATS2023_LAYOUT = RawLayout(
    name="brats2023",
    title="BraTS 2023",
    folder_pattern=r"BraTS-GLI-\d{5}-\d{3}",
    separator="-",
    parts={"t1n": "t1n", "t1c": "t1c", "t2w": "t2w", "t2f": "t2f", "seg": "seg"},
    labels=BRATS2023_LABELS,
)
BRATS2021_LAYOUT = RawLayout(
    name="brats2021",
    title="BraTS 2021",
    folder_pattern=r"BraTS2021_(?P<index>\d{5})",
    separator="_",
    parts={"t1": "t1n", "t1ce": "t1c", "t2": "t2w", "flair": "t2f", "seg": "seg"},
    labels=BRATS2021_LABELS,
    case_id_template="BraTS-GLI-{index}-000",
)
#: The layouts preparation reads, by name.
LAYOUTS: dict[str, RawLayout] = {layout.name: layout for layout in (BRATS2023_LAYOUT,
                                                                     BRATS2021_LAYOUT)}


class MixedLayoutsError(PreparationError):
    """A raw folder holds case folders of more than one release; ``found`` maps each layout's
    name to its case folders."""

    def __init__(self, found: dict[str, list[str]]) -> None:
        self.found = found
        described = "; ".join(
            f"{len(names)} {LAYOUTS[name].title} ({', '.join(names[:2])}"
            f"{', ...' if len(names) > 2 else ''})" for name, names in sorted(found.items()))
        super().__init__(
            f"the raw folder mixes case folders of several BraTS releases: {described}. The "
            "releases share patients (BraTS2021_XXXXX is BraTS-GLI-XXXXX-000), so one dataset "
            "holds one release: move each release into its own folder and prepare each")


def native_layout(contract: BratsContract) -> RawLayout:
    """The contract's own naming (the BraTS 2023 layout for the shipped contracts): its case id
    pattern, ``<id>-<part>`` file names, its label convention."""
    return RawLayout(
        name=BRATS2023_LAYOUT.name, title=BRATS2023_LAYOUT.title,
        folder_pattern=contract.case_id_pattern, separator="-",
        parts={part: part for part in contract.parts}, labels=contract.label_map)


def layout_of(folder: str, contract: BratsContract) -> RawLayout | None:
    """The layout whose case folder name ``folder`` is, or None.

    The 2023 layout is the contract's own naming (:func:`native_layout`)."""
    if contract.is_case_id(folder):
        return native_layout(contract)
    if BRATS2021_LAYOUT.matches(folder):
        return BRATS2021_LAYOUT
    return None


def folder_layout(folders: list[Path], contract: BratsContract) -> RawLayout:
    """The one layout of a raw folder's case folders; :class:`MixedLayoutsError` when they
    use several. Folders of no known layout are left to be rejected one by one."""
    found: dict[str, list[str]] = {}
    for folder in folders:
        layout = layout_of(folder.name, contract)
        if layout is not None:
            found.setdefault(layout.name, []).append(folder.name)
    if len(found) > 1:
        raise MixedLayoutsError(found)
    if found.keys() == {BRATS2021_LAYOUT.name}:
        return BRATS2021_LAYOUT
    return native_layout(contract)
