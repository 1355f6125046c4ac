"""Every task's accuracy: an evaluation's task and its headline metric's name and value, and
what sorting by accuracy orders on (the headline signed so that higher is better, -1e300
without one), indexed with the task.

Revision ID: 0002
Revises: 0001

Rows indexed before this revision hold a classifier's top-1 and top-5 only:

- a row with a top-1 is a classifier's: its task, headline (``top-1``, its value) and order
  are filled here from the row itself;
- a row with a data set but no top-1 is another task's (detection, segmentation, language
  modelling, translation), whose metrics only its stored record holds, and a migration sees the
  database alone (the store may be a bucket that only the servers reach). Such rows are dropped
  with their results, and the index is marked as not rebuilt, so that the next rebuild indexes
  them again from their records with every column filled: the embedded client and a server do
  that by themselves when they open the index, ``mlms db rebuild`` by hand. Their sweep cells
  stay. A row whose record is gone from the store is not listed again (nothing could be read of
  it either);
- a row without a data set (no accuracy measured) keeps the new columns empty.

The index's generation changes, so that no server answers a listing it cached before.
"""

from __future__ import annotations

import uuid

import sqlalchemy as sa
from alembic import op

revision = "0002"
down_revision = "0001"
branch_labels = None
depends_on = None

# The tables as this revision finds them (never the current schema, which later revisions move).
_evaluations = sa.table(
    "evaluations",
    sa.column("id", sa.String),
    sa.column("dataset", sa.String),
    sa.column("accuracy_top1", sa.Float),
    sa.column("task", sa.String),
    sa.column("accuracy_metric", sa.String),
    sa.column("accuracy_value", sa.Float),
    sa.column("accuracy_order", sa.Float),
)
_results = sa.table("results", sa.column("evaluation_id", sa.String))
_state = sa.table("index_state", sa.column("key", sa.String), sa.column("value", sa.Text))


def upgrade() -> None:
    op.add_column("evaluations", sa.Column("task", sa.String(64)))
    op.add_column("evaluations", sa.Column("accuracy_metric", sa.String(64)))
    op.add_column("evaluations", sa.Column("accuracy_value", sa.Float()))
    op.add_column(
        "evaluations",
        sa.Column("accuracy_order", sa.Float(), nullable=False, server_default=sa.text("-1e300")),
    )
    op.create_index("ix_evaluations_task_created", "evaluations", ["task", "created_at", "id"])
    op.create_index("ix_evaluations_task_accuracy", "evaluations", ["task", "accuracy_order", "id"])
    e = _evaluations
    op.execute(
        e.update()
        .where(e.c.accuracy_top1.is_not(None))
        .values(
            task="classification",
            accuracy_metric="top-1",
            accuracy_value=e.c.accuracy_top1,
            accuracy_order=e.c.accuracy_top1,
        )
    )
    other_task = sa.and_(e.c.dataset.is_not(None), e.c.accuracy_top1.is_(None))
    bind = op.get_bind()
    bind.execute(_results.delete().where(_results.c.evaluation_id.in_(
        sa.select(e.c.id).where(other_task)
    )))  # fmt: skip
    if bind.execute(e.delete().where(other_task)).rowcount:
        bind.execute(_state.delete().where(_state.c.key == "rebuilt"))
    bind.execute(_state.update().where(_state.c.key == "generation").values(value=uuid.uuid4().hex))


def downgrade() -> None:
    op.drop_index("ix_evaluations_task_accuracy", "evaluations")
    op.drop_index("ix_evaluations_task_created", "evaluations")
    with op.batch_alter_table("evaluations") as batch:
        batch.drop_column("accuracy_order")
        batch.drop_column("accuracy_value")
        batch.drop_column("accuracy_metric")
        batch.drop_column("task")
