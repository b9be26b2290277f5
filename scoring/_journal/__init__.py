"""A run's own record of its output: the journal of the files it staged
(:mod:`.journal`), the staging's record of what the run was given (:mod:`.staging`), the
manifest a folder output publishes (:mod:`.manifest`), the output's lease against a
second writer (:mod:`.lease`), and the files it owns (:mod:`.owned`).  Nothing here
knows a format: the publishers of :mod:`scoring._formats` write through it.
"""

from .journal import STAGING, Entry, Journal, job_key
from .lease import OutputLease
from .manifest import FileRecord, InputRecord, Manifest

__all__ = [
    "STAGING", "Entry", "FileRecord", "InputRecord", "Journal", "Manifest", "OutputLease",
    "job_key",
]  # fmt: skip
