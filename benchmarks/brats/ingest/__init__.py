"""From the scanner to the benchmark: a hospital's DICOM studies (or native-space NIfTI) in,
benchmark-ready BraTS cases out, with no patient identifier in anything written.

Modules, in the order a study goes through them: :mod:`.dicom` (series to volumes, refusing what
it cannot convert faithfully), :mod:`.sequences` (which series is which modality, from an
editable mapping file), :mod:`.pseudonyms` (case ids the hospital keeps the key to),
:mod:`.register` (co-registration, template registration, brain extraction, resampling, labels
carried onto the grid), :mod:`.review` (what the hospital looks at before accepting),
:mod:`.pipeline` (the resumable run over a folder of studies). :mod:`.phantom` writes synthetic
studies with a known answer; :mod:`.geometry` holds the grid and the template.
"""
