"""How a job spec names a tenant's file: ``"<prefix><id>"``.

A dataset a tenant uploaded is ``upload:<id>`` (a job's ``dataset``), its
trainer code ``code:<id>`` (a job's ``algorithm``). One form, one parser:
an id is 1 to 18 digits with no leading zero, nothing around it.

Example: ``UPLOAD.ref(7) == "upload:7"``, ``CODE.parse("code:12") == 12``,
``CODE.parse("code:012") is None``.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field


@dataclass(frozen=True)
class FileRef:
    """The reference form of one kind of tenant file."""

    prefix: str
    _pattern: re.Pattern[str] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "_pattern",
                           re.compile(rf"^{re.escape(self.prefix)}([1-9][0-9]{{0,17}})$"))

    def ref(self, file_id: int) -> str:
        """The name a job spec uses for file ``file_id``."""
        return f"{self.prefix}{file_id}"

    def is_ref(self, text: str) -> bool:
        """Whether ``text`` means a file of this kind (well formed or not)."""
        return text.startswith(self.prefix)

    def parse(self, text: str) -> int | None:
        """The id in ``text``, or None if ``text`` is not exactly that form."""
        match = self._pattern.match(text)
        return int(match.group(1)) if match else None


UPLOAD = FileRef("upload:")
"""A tenant's uploaded dataset, as a job's ``dataset``."""
CODE = FileRef("code:")
"""A tenant's uploaded trainer code, as a job's ``algorithm``."""
