"""The questions of the investigation, one subpackage each, with the same roles in the same file names (`record`,
`run`, `analysis`, `figure`, `section`: `where223.study._roles`): `fix` (notebook 03), `variants` (04), `matrix`
(05), `architectures` (06).
`report` writes the write-up: sections 1-2 (the failure and its cause, from notebooks 01-02's records), then each
question's `section`."""

__all__ = ["architectures", "fix", "matrix", "report", "variants"]
