"""Where evaluation records lie in a store; light, so that the index's catch-up needs no record
model while nothing is pending."""

#: The records: ``evaluations/<id>.json``.
PREFIX = "evaluations/"
#: Markers of records stored while no index took them: ``index/pending/<id>``.
PENDING = "index/pending/"
