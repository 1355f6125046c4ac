"""The evaluation index: evaluations, their results per batch size, sweep cells, state.

Revision ID: 0001
Revises:
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0001"
down_revision = None
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "evaluations",
        sa.Column("id", sa.String(32), primary_key=True),
        sa.Column("created_at", sa.DateTime(), nullable=False),
        sa.Column("status", sa.String(16), nullable=False),
        sa.Column("model", sa.String(256), nullable=False),
        sa.Column("model_version", sa.String(64), nullable=False),
        sa.Column("framework", sa.String(64), nullable=False),
        sa.Column("framework_version", sa.String(128), nullable=False),
        sa.Column("hw", sa.String(64), nullable=False),
        sa.Column("hardware", sa.String(256), nullable=False),
        sa.Column("device", sa.String(64), nullable=False),
        sa.Column("host", sa.String(256), nullable=False),
        sa.Column("precision", sa.String(16), nullable=False),
        sa.Column("compile", sa.String(64)),
        sa.Column("channels_last", sa.Boolean(), nullable=False),
        sa.Column("input_on_device", sa.Boolean(), nullable=False),
        sa.Column("inputs", sa.String(512), nullable=False),
        sa.Column("seq_len", sa.Integer()),
        sa.Column("generate", sa.Integer()),
        sa.Column("trace_level", sa.String(32), nullable=False),
        sa.Column("trace_id", sa.String(32)),
        sa.Column("batch_sizes", sa.String(512), nullable=False),
        sa.Column("p50_ms", sa.Float()),
        sa.Column("throughput", sa.Float()),
        sa.Column("accuracy_top1", sa.Float()),
        sa.Column("accuracy_top5", sa.Float()),
        sa.Column("dataset", sa.String(256)),
        sa.Column("agent_id", sa.String(64), nullable=False),
        sa.Column("agent", sa.String(256), nullable=False),
        sa.Column("search", sa.Text(), nullable=False),
    )
    op.create_index("ix_evaluations_created", "evaluations", ["created_at", "id"])
    op.create_index(
        "ix_evaluations_model_hw_created", "evaluations", ["model", "hw", "created_at", "id"]
    )
    op.create_index(
        "ix_evaluations_framework_created", "evaluations", ["framework", "created_at", "id"]
    )
    op.create_index("ix_evaluations_hw_created", "evaluations", ["hw", "created_at", "id"])
    op.create_table(
        "results",
        sa.Column("evaluation_id", sa.String(32), primary_key=True),
        sa.Column("batch_size", sa.Integer(), primary_key=True),
        sa.Column("p50_ms", sa.Float(), nullable=False),
        sa.Column("p90_ms", sa.Float(), nullable=False),
        sa.Column("p99_ms", sa.Float(), nullable=False),
        sa.Column("mean_ms", sa.Float(), nullable=False),
        sa.Column("throughput", sa.Float(), nullable=False),
    )
    op.create_table(
        "sweep_cells",
        sa.Column("sweep_id", sa.String(32), primary_key=True),
        sa.Column("evaluation_id", sa.String(32), primary_key=True),
    )
    op.create_index("ix_sweep_cells_evaluation", "sweep_cells", ["evaluation_id"])
    op.create_table(
        "index_state",
        sa.Column("key", sa.String(64), primary_key=True),
        sa.Column("value", sa.Text(), nullable=False),
    )


def downgrade() -> None:
    op.drop_table("index_state")
    op.drop_table("sweep_cells")
    op.drop_table("results")
    op.drop_table("evaluations")
