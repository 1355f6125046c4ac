"""The index's tables (SQLAlchemy Core). The migrations create them; a change here comes with a
new revision under ``migrations/versions``."""

from __future__ import annotations

from sqlalchemy import (
    Boolean,
    Column,
    DateTime,
    Float,
    Index,
    Integer,
    MetaData,
    String,
    Table,
    Text,
    text,
)

#: A row's ``accuracy_order`` without a headline: below every headline, a perplexity's negative
#: included (SQL text, the column's default).
NO_ACCURACY = "-1e300"

metadata = MetaData()

#: One row per stored evaluation record: what listings show, filter and sort on.
evaluations = Table(
    "evaluations",
    metadata,
    Column("id", String(32), primary_key=True),  # unique: the first writer of an id wins
    Column("created_at", DateTime(), nullable=False),  # UTC
    Column("status", String(16), nullable=False),
    Column("model", String(256), nullable=False),
    Column("model_version", String(64), nullable=False),
    Column("framework", String(64), nullable=False),
    Column("framework_version", String(128), nullable=False),
    Column("hw", String(64), nullable=False),  # the --hw alias asked for, lower case
    Column("hardware", String(256), nullable=False),  # the device's name
    Column("device", String(64), nullable=False),
    Column("host", String(256), nullable=False),
    Column("precision", String(16), nullable=False),
    Column("compile", String(64)),
    Column("channels_last", Boolean(), nullable=False),
    Column("input_on_device", Boolean(), nullable=False),
    Column("inputs", String(512), nullable=False),
    Column("seq_len", Integer()),
    Column("generate", Integer()),
    Column("trace_level", String(32), nullable=False),
    Column("trace_id", String(32)),
    Column("batch_sizes", String(512), nullable=False),  # "1,8,32"
    Column("p50_ms", Float()),  # at the first batch size
    Column("throughput", Float()),  # inputs/s at the first batch size
    Column("accuracy_top1", Float()),
    Column("accuracy_top5", Float()),
    Column("dataset", String(256)),
    # With a data set: its task and its headline metric (``Accuracy.headline``).
    Column("task", String(64)),
    Column("accuracy_metric", String(64)),
    Column("accuracy_value", Float()),
    # What sorting by accuracy orders on (``rows.accuracy_order``), never NULL so that an index
    # serves the order and a page token compares the same in both dialects.
    Column("accuracy_order", Float(), nullable=False, server_default=text(NO_ACCURACY)),
    Column("agent_id", String(64), nullable=False),
    Column("agent", String(256), nullable=False),  # the agent's address, or "embedded"
    # Lower-case words of the fields the free-text filter searches.
    Column("search", Text(), nullable=False),
    Index("ix_evaluations_created", "created_at", "id"),
    Index("ix_evaluations_model_hw_created", "model", "hw", "created_at", "id"),
    Index("ix_evaluations_framework_created", "framework", "created_at", "id"),
    Index("ix_evaluations_hw_created", "hw", "created_at", "id"),
    Index("ix_evaluations_task_created", "task", "created_at", "id"),
    Index("ix_evaluations_task_accuracy", "task", "accuracy_order", "id"),
)

#: Per batch size: the numbers the named views aggregate.
results = Table(
    "results",
    metadata,
    Column("evaluation_id", String(32), primary_key=True),
    Column("batch_size", Integer(), primary_key=True),
    Column("p50_ms", Float(), nullable=False),
    Column("p90_ms", Float(), nullable=False),
    Column("p99_ms", Float(), nullable=False),
    Column("mean_ms", Float(), nullable=False),
    Column("throughput", Float(), nullable=False),
)

#: Which evaluations a sweep holds (its cells' ids are known when it is made, before any runs).
sweep_cells = Table(
    "sweep_cells",
    metadata,
    Column("sweep_id", String(32), primary_key=True),
    Column("evaluation_id", String(32), primary_key=True),
    Index("ix_sweep_cells_evaluation", "evaluation_id"),
)

#: Facts about the index itself: the store it indexes, how far a rebuild got.
state = Table(
    "index_state",
    metadata,
    Column("key", String(64), primary_key=True),
    Column("value", Text(), nullable=False),
)
