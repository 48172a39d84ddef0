"""Per-source conversion rules of ``tools/import_corpus.py`` (published_runs.yaml → corpus.json)."""
