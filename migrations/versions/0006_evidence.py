"""Evidence: analysis findings linked to cases and the librarian's kb_doc/kb_chunk index. Owned by the evidence issue (9).

Revision ID: 0006
Revises: 0005
"""

from __future__ import annotations

revision = "0006"
down_revision = "0005"
branch_labels = None
depends_on = None


def upgrade() -> None:
    pass


def downgrade() -> None:
    pass
